"""What the knowledge base holds: the figures ``pgkb db status`` and ``pgkb quickstart`` print."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import keyword_backend, queries
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
            status.update(_counts(conn))
            status.update(_vector_index(conn))
            status.update(_keyword_backend(conn, settings))
            status.update(_memory(conn))
        return status
    finally:
        conn.close()


def _counts(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """What the knowledge base holds. A role made by ``pgkb db grant --read`` may not read the
    tables themselves, only the functions granted to it: it gets the same figures from
    ``kb.stats()``, which counts what that role is allowed to see."""
    try:
        with conn.cursor(row_factory=class_row(queries.KbCounts)) as cur:
            counts = cur.execute(queries.KB_COUNTS).fetchone()
        assert counts is not None
        return dataclasses.asdict(counts)
    except psycopg.errors.InsufficientPrivilege:
        conn.rollback()
    row = conn.execute(queries.KB_STATS, (0,)).fetchone()
    stats: dict[str, Any] = row[0] if row is not None and isinstance(row[0], dict) else {}
    active = stats.get("active_model") or None
    # a reader granted only some collections gets no model coverage (it counts the others)
    models = stats.get("models") or []
    embeddings = (
        sum(int(m.get("embeddings") or 0) for m in models if m.get("is_active")) if models else None
    )
    return {
        "documents": stats.get("documents"),
        "chunks": stats.get("chunks"),
        "embeddings": embeddings,
        "active_model": f"{active['name']} ({active['dims']} dims)" if active else None,
        "access": "read (figures from kb.stats)",
    }


def _keyword_backend(conn: psycopg.Connection[Any], settings: Settings) -> dict[str, Any]:
    """Which keyword backend serves and why (``kb.keyword_backend_status()``); nothing on a
    schema older than the function."""
    try:
        found = keyword_backend.status(conn, settings)
    except psycopg.errors.UndefinedFunction:
        conn.rollback()
        return {}
    return {"keyword_backend": keyword_backend.describe(found)}


def _vector_index(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The active model's HNSW index as it was built (``kb.vector_index_status()``): its
    parameters, the ef_search searches use, the embeddings it was sized for. A reader (not told
    the whole database's size) and a schema older than the function get nothing here."""
    try:
        with conn.cursor(row_factory=class_row(queries.VectorIndexRow)) as cur:
            rows = cur.execute(queries.VECTOR_INDEX_STATUS).fetchall()
    except (psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege):
        conn.rollback()
        return {}
    active = next((r for r in rows if r.is_active), None)
    if active is None:
        return {}
    if active.index_name is None:
        return {"vector_index": "none (searches read every vector: exact, slower)"}
    return {
        "vector_index": (
            f"kb.{active.index_name}: m {active.m}, ef_construction {active.ef_construction}, "
            f"ef_search {active.ef_search}, sized for {active.built_for:,} embeddings "
            f"({active.tier_now} tier)"
            if active.sized_by == "corpus"
            else f"kb.{active.index_name}: m {active.m}, ef_construction "
            f"{active.ef_construction} (set explicitly), ef_search {active.ef_search}, "
            f"built over {active.built_for:,} embeddings"
        )
    }


MEMORY_HINT = (
    "shared_buffers holds less than what searches read, so a warm corpus is copied from the "
    "operating system's cache page by page: see the scaling guide, 'Memory for a large corpus'"
)


def _memory(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The size of what searches read (``kb.search_relations()``) and the server's
    ``shared_buffers``, with a hint when the pool cannot hold it. Only the tables' owner may
    read the sizes (they would tell a reader of some collections how large the others are), and
    a schema older than the function has none: both get nothing here."""
    try:
        row = conn.execute(queries.SEARCH_MEMORY).fetchone()
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction):
        conn.rollback()
        return {}
    assert row is not None
    reads, buffers, reads_shown, buffers_shown = row
    out: dict[str, Any] = {"search_reads": reads_shown, "shared_buffers": buffers_shown}
    if int(reads) > int(buffers):
        out["memory_hint"] = MEMORY_HINT
    return out
