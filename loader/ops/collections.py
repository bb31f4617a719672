"""Collections from Python: ``pgkb collections`` (list, create, describe, drop).

A collection is one knowledge base of the database (``kb.collections``); every document belongs
to one. Listing goes through ``kb.collection_list`` (a reader sees only the collections it may
read); creating, describing and dropping are the writer's (dropping deletes the collection's
documents with their chunks, embeddings and relations, and the grants of it).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from loader.db import queries
from loader.errors import PgkbError
from loader.filters import DEFAULT_COLLECTION, check_collection


def list_collections(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The collections the role may read, with description and document and chunk counts."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(queries.COLLECTION_LIST).fetchall()
    conn.rollback()
    return [dict(r) for r in rows]


def create(conn: psycopg.Connection[Any], name: str, description: str | None) -> bool:
    """Create collection ``name`` (True), or describe it anew when it exists and a description
    is given (False: it existed)."""
    check_collection(name)
    with conn.transaction():
        created = conn.execute(queries.CREATE_COLLECTION, (name, description or "")).rowcount
        if not created and description is not None:
            conn.execute(queries.DESCRIBE_COLLECTION, (description, name))
    return bool(created)


def drop(conn: psycopg.Connection[Any], name: str) -> int:
    """Delete collection ``name`` with its documents (and their chunks, embeddings, relations)
    and the grants of it; returns how many documents went. The default collection stays (its
    documents go)."""
    check_collection(name)
    found = {c["name"]: c for c in list_collections(conn)}
    if name not in found:
        raise PgkbError(f"no collection {name!r}", hint="pgkb collections lists them")
    with conn.transaction():
        removed = conn.execute(queries.DROP_COLLECTION_DOCUMENTS, (name,)).rowcount
        if name != DEFAULT_COLLECTION:
            conn.execute(queries.DROP_COLLECTION, (name,))
    return int(removed)
