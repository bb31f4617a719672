"""Index care: the HNSW index of a model that lacks it, the HNSW index of a corpus that crossed a
size tier built again with its new parameters, ``REINDEX INDEX CONCURRENTLY`` of every kb index,
``VACUUM (ANALYZE)`` of every kb table. They run outside a transaction (PostgreSQL requires it for
the last two), on an autocommit connection; only building an index blocks writes (not searches)
while it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from loader.db import queries
from loader.ingest.writer import INGEST_LOCK_KEY


def build_missing(
    conn: psycopg.Connection[Any],
    hnsw: tuple[int | None, int | None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Build the HNSW index of every model that lacks it (a bulk load killed before building it
    again; see :mod:`loader.ingest.bulk_index`), with ``hnsw`` = (m, ef_construction), None (or
    a None part) = sized from the model's embeddings (``kb.hnsw_parameters``); ``conn`` in
    autocommit.

    Holds the ingestion lock meanwhile; while a load holds it (and will build the index itself
    when it ends), nothing is built. One row per model without its index: ``index``,
    ``built`` (bool), ``error`` (None, or why it was not built)."""
    missing = conn.execute(queries.MODELS_WITHOUT_INDEX).fetchall()
    if not missing:
        return []
    locked = conn.execute(queries.TRY_ADVISORY_LOCK, (INGEST_LOCK_KEY,)).fetchone()
    if not locked or not locked[0]:
        return [
            {"index": index, "built": False, "error": None, "skipped": "a load in progress "
             "dropped it for a bulk load and builds it when it ends"}
            for _, _, index in missing
        ]  # fmt: skip
    done: list[dict[str, Any]] = []
    try:
        for model_id, _, index in missing:
            if progress:
                progress(index)
            error = None
            try:
                conn.execute(queries.BUILD_MODEL_INDEX, (model_id, *(hnsw or (None, None))))
            except psycopg.Error as exc:
                error = (exc.diag.message_primary if exc.diag else None) or str(exc)
            done.append({"index": index, "built": error is None, "error": error, "skipped": None})
    finally:
        conn.execute(queries.ADVISORY_UNLOCK, (INGEST_LOCK_KEY,))
    return done


def resize(
    conn: psycopg.Connection[Any], progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Build again each model's HNSW index whose size tier (``kb.hnsw_parameters``) no longer
    matches its embeddings (``kb.resize_model_index``), under the ingestion lock; ``conn`` in
    autocommit. While a load holds the lock nothing is resized (the load builds what it
    dropped, sized for the corpus then). One dict per indexed model, as the function returns it,
    plus ``error`` (None, or why the rebuild failed)."""
    locked = conn.execute(queries.TRY_ADVISORY_LOCK, (INGEST_LOCK_KEY,)).fetchone()
    if not locked or not locked[0]:
        return []
    done: list[dict[str, Any]] = []
    try:
        for (model_id,) in conn.execute(queries.INDEXED_MODELS).fetchall():
            if progress:
                progress(str(model_id))
            try:
                row = conn.execute(queries.RESIZE_MODEL_INDEX, (model_id,)).fetchone()
            except psycopg.Error as exc:
                reason = (exc.diag.message_primary if exc.diag else None) or str(exc)
                done.append({"model_id": model_id, "resized": False, "error": reason})
                continue
            if row is not None and row[0] is not None:
                done.append({"model_id": model_id, **row[0], "error": None})
    finally:
        conn.execute(queries.ADVISORY_UNLOCK, (INGEST_LOCK_KEY,))
    return done


def reindex(
    conn: psycopg.Connection[Any],
    progress: Callable[[str], None] | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Rebuild every kb index concurrently (invalid ones included) but those named in ``skip``
    (just built); ``conn`` in autocommit.

    One row per index: ``index``, ``was_invalid`` and ``error`` (None, or why the rebuild failed:
    the index keeps its previous state and the others are still rebuilt)."""
    done: list[dict[str, Any]] = []
    for name, invalid in conn.execute(queries.KB_INDEXES).fetchall():
        if name in skip:
            continue
        if progress:
            progress(name)
        error = None
        try:
            conn.execute(queries.REINDEX_CONCURRENTLY.format(sql.Identifier("kb", name)))
        except psycopg.Error as exc:
            error = (exc.diag.message_primary if exc.diag else None) or str(exc)
        done.append({"index": name, "was_invalid": bool(invalid), "error": error})
    return done


def vacuum(
    conn: psycopg.Connection[Any], progress: Callable[[str], None] | None = None
) -> list[str]:
    """VACUUM (ANALYZE) every kb table; ``conn`` in autocommit."""
    done = []
    for (name,) in conn.execute(queries.KB_TABLES).fetchall():
        if progress:
            progress(name)
        conn.execute(queries.VACUUM_ANALYZE.format(sql.Identifier("kb", name)))
        done.append(name)
    return done
