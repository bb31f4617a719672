"""What the knowledge base holds: the figures ``pgkb db status`` and ``pgkb quickstart`` print."""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg.rows import class_row

from loader.db import queries
from loader.db.connect import connect, database_url, redact
from loader.db.migrations import current_revision, head_revision
from loader.settings import Settings


def schema_status(settings: Settings) -> dict[str, Any]:
    url = database_url(settings)
    conn = connect(url, register=False)
    try:
        server = conn.execute(queries.SERVER_VERSION).fetchone()
        vector = conn.execute(queries.PGVECTOR_INSTALLED).fetchone()
        revision = current_revision(conn)
        status: dict[str, Any] = {
            "database": redact(url),
            "embedded": not settings.database_url,
            "server_version": server[0] if server else None,
            "pgvector": vector[0] if vector else None,
            "schema_revision": revision,
            "head_revision": head_revision(),
        }
        if revision is not None:
            with conn.cursor(row_factory=class_row(queries.KbCounts)) as cur:
                counts = cur.execute(queries.KB_COUNTS).fetchone()
            assert counts is not None
            status.update(dataclasses.asdict(counts))
        return status
    finally:
        conn.close()
