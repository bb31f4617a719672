"""What the knowledge base holds: the figures ``pgkb db status`` and ``pgkb quickstart`` print."""

from __future__ import annotations

from typing import Any

from loader.db import connect, current_revision, database_url, head_revision, redact
from loader.settings import Settings


def schema_status(settings: Settings) -> dict[str, Any]:
    url = database_url(settings)
    conn = connect(url, register=False)
    try:
        server = conn.execute("SHOW server_version").fetchone()
        vector = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
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
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM kb.documents), (SELECT count(*) FROM kb.chunks), "
                "(SELECT count(*) FROM kb.embeddings), "
                "(SELECT name || ' (' || dims || ' dims)' FROM kb.embedding_models WHERE is_active)"
            ).fetchone()
            assert counts is not None
            status.update(
                documents=counts[0], chunks=counts[1], embeddings=counts[2], active_model=counts[3]
            )
        return status
    finally:
        conn.close()
