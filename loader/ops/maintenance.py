"""Index care: ``REINDEX INDEX CONCURRENTLY`` of every kb index, ``VACUUM (ANALYZE)`` of every
kb table. Both run outside a transaction (PostgreSQL requires it), on an autocommit connection,
and neither blocks searches or writes for longer than a moment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loader.db import queries


def reindex(conn: Any, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Rebuild every kb index concurrently (invalid ones included); ``conn`` in autocommit.

    One row per index: ``index``, ``was_invalid`` and ``error`` (None, or why the rebuild failed:
    the index keeps its previous state and the others are still rebuilt)."""
    import psycopg
    from psycopg import sql

    done: list[dict[str, Any]] = []
    for name, invalid in conn.execute(queries.KB_INDEXES).fetchall():
        if progress:
            progress(name)
        error = None
        try:
            conn.execute(queries.REINDEX_CONCURRENTLY.format(sql.Identifier("kb", name)))
        except psycopg.Error as exc:
            error = (exc.diag.message_primary if exc.diag else None) or str(exc)
        done.append({"index": name, "was_invalid": bool(invalid), "error": error})
    return done


def vacuum(conn: Any, progress: Callable[[str], None] | None = None) -> list[str]:
    """VACUUM (ANALYZE) every kb table; ``conn`` in autocommit."""
    from psycopg import sql

    done = []
    for (name,) in conn.execute(queries.KB_TABLES).fetchall():
        if progress:
            progress(name)
        conn.execute(queries.VACUUM_ANALYZE.format(sql.Identifier("kb", name)))
        done.append(name)
    return done
