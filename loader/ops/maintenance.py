"""Index care: ``REINDEX INDEX CONCURRENTLY`` of every kb index, ``VACUUM (ANALYZE)`` of every
kb table. Both run outside a transaction (PostgreSQL requires it), on an autocommit connection,
and neither blocks searches or writes for longer than a moment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

INDEXES_SQL = """
SELECT i.relname, NOT x.indisvalid
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
 WHERE i.relnamespace = 'kb'::regnamespace
 ORDER BY 1
"""
TABLES_SQL = """
SELECT c.relname FROM pg_class c
 WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r' ORDER BY 1
"""


def reindex(conn: Any, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Rebuild every kb index concurrently (invalid ones included); ``conn`` in autocommit."""
    from psycopg import sql

    done = []
    for name, invalid in conn.execute(INDEXES_SQL).fetchall():
        if progress:
            progress(name)
        conn.execute(sql.SQL("REINDEX INDEX CONCURRENTLY {}").format(sql.Identifier("kb", name)))
        done.append({"index": name, "was_invalid": bool(invalid)})
    return done


def vacuum(conn: Any, progress: Callable[[str], None] | None = None) -> list[str]:
    """VACUUM (ANALYZE) every kb table; ``conn`` in autocommit."""
    from psycopg import sql

    done = []
    for (name,) in conn.execute(TABLES_SQL).fetchall():
        if progress:
            progress(name)
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier("kb", name)))
        done.append(name)
    return done
