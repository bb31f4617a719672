"""Changing the embedding model without downtime.

The knowledge base keeps one vector per (chunk, model) and a partial HNSW index per model, so a
second model's vectors can be computed beside the active one's while searches keep using the
active model (``kb.vector_search`` only reads the rows of the model it is given):

1. ``add_model``: register the new model (``kb.register_model``) with what pgkb needs to embed
   with it again (provider, base URL, input limit; never an API key) in its ``config``;
2. ``reembed``: embed every chunk that has no vector of it (``kb.chunks_missing_embedding``),
   batch after batch, each committed, so an interrupted run resumes where it stopped; it holds
   the advisory lock ingestion holds, so it never interleaves with an ingest or another reembed;
3. ``activate``: ``kb.activate_model``, atomic, refused while chunks lack its vectors;
4. ``drop``: ``kb.drop_model`` for a model no longer wanted (never the active one).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.db.session import connection
from loader.errors import ConfigError, ModelMismatchError, PgkbError, database_error
from loader.ingest.bulk_index import bulk_index
from loader.ingest.chunking import Chunker
from loader.ingest.writer import ingest_lock
from loader.providers.embeddings import chunk_size, get_embedder
from loader.providers.local import folder_prompts, model_folder
from loader.settings import Settings

if TYPE_CHECKING:
    from loader.ingest.chunking import Chunker
    from loader.providers.embeddings import Embedder

log = logging.getLogger(__name__)

ProgressCallback = Callable[[str, dict[str, Any]], None]
"""``progress(event, info)``: ``start`` (total, model), ``batch`` (count), ``waiting`` (holder)."""


Model = queries.ModelInfo
"""A registered model with its coverage (a row of ``kb.models()``)."""


def list_models(conn: psycopg.Connection[Any]) -> list[Model]:

    with conn.cursor(row_factory=class_row(Model)) as cur:
        models = cur.execute(queries.MODELS).fetchall()
    conn.rollback()
    return list(models)


def find_model(conn: psycopg.Connection[Any], name: str, dims: int | None = None) -> Model:
    """The registered model ``name`` (and ``dims``), or :class:`PgkbError` listing the others."""
    models = list_models(conn)
    found = [m for m in models if m.name == name and (dims is None or m.dims == dims)]
    if len(found) == 1:
        return found[0]
    registered = ", ".join(f"{m.name} ({m.dims} dims)" for m in models) or "none"
    if not found:
        raise PgkbError(
            f"embedding model {name!r}"
            + (f" ({dims} dims)" if dims else "")
            + f" is not registered (registered: {registered})",
            hint="pgkb models add NAME --dims N --provider local|openai registers one",
        )
    raise PgkbError(
        f"embedding model {name!r} is registered with several dimensions ({registered})",
        hint="name the dimensions with --dims",
    )


def add_model(
    conn: psycopg.Connection[Any],
    name: str,
    dims: int,
    provider: str,
    *,
    base_url: str | None = None,
    max_input_tokens: int | None = None,
    api_key_env: str | None = None,
    hnsw_m: int | None = None,
    hnsw_ef_construction: int | None = None,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
    request_dimensions: bool = False,
) -> Model:
    """Register a model beside the others (refused when it is registered already).

    Its prompts are part of it (they change its vectors): a local model's default to those its
    folder declares; ``request_dimensions`` sends ``dims`` as the API request's
    ``dimensions``."""
    if provider not in ("local", "openai"):
        raise ConfigError(f"provider must be 'local' or 'openai', got {provider!r}")
    if provider == "local" and (query_prompt is None or document_prompt is None):
        declared = folder_prompts(model_folder(name))
        query_prompt = declared[0] if query_prompt is None else query_prompt
        document_prompt = declared[1] if document_prompt is None else document_prompt
    if any(m.name == name and m.dims == dims for m in list_models(conn)):
        raise PgkbError(
            f"embedding model {name!r} ({dims} dims) is registered already",
            hint="pgkb models list shows it; pgkb models reembed --model NAME fills it",
        )
    config = {
        k: v
        for k, v in (
            ("base_url", base_url),
            ("max_input_tokens", max_input_tokens),
            ("api_key_env", api_key_env),
            ("query_prompt", query_prompt or None),
            ("document_prompt", document_prompt or None),
            ("request_dimensions", request_dimensions or None),
        )
        if v is not None
    }
    conn.execute(
        queries.REGISTER_MODEL,
        (name, dims, provider, json.dumps(config), hnsw_m, hnsw_ef_construction),
    )
    conn.commit()
    return find_model(conn, name, dims)


def _sql_error(conn: psycopg.Connection[Any], exc: Exception) -> PgkbError | None:
    """The error to raise for ``exc`` when one of pgkb's functions raised it by code (the
    transaction rolled back), else None (``exc`` is not one to explain)."""
    error = database_error(exc)
    if error is not None and conn.info.transaction_status != 0:
        conn.rollback()
    return error


MAX_INDEXED_DIMS = 2000
"""pgvector's HNSW indexes vectors of at most 2,000 dimensions; larger models are searched
exactly, with no index."""


def _index_missing(model: Model) -> bool:
    return model.index_name is None and model.dims <= MAX_INDEXED_DIMS


def activate(conn: psycopg.Connection[Any], name: str, dims: int | None = None) -> Model:
    """Make the model the active one (atomic); refused while chunks lack its vectors (in SQL)
    or while its HNSW index is missing: a search through it would read every vector of it, so
    the switch would slow every search without a word."""
    model = find_model(conn, name, dims)
    if _index_missing(model) and not model.is_active:
        raise PgkbError(
            f"embedding model {model.name} ({model.dims} dims) has no HNSW index "
            f"(embeddings_hnsw_model_{model.id} is missing: a bulk load was stopped before "
            "building it again), so every search through it would read all its vectors; it "
            "was not activated",
            hint=f"pgkb models reembed --model {model.name} builds it (so does pgkb db "
            "reindex), then activate it",
        )
    try:
        conn.execute(queries.ACTIVATE_MODEL, (model.name, model.dims))
        conn.commit()
        # the index is searched from now on: sized for the corpus it holds now
        conn.execute(queries.RESIZE_MODEL_INDEX, (model.id,))
        conn.commit()
    except psycopg.Error as exc:
        error = _sql_error(conn, exc)
        if error is None:
            raise
        raise error from None
    return find_model(conn, name, model.dims)


def drop(conn: psycopg.Connection[Any], name: str, dims: int | None = None) -> int:
    """Remove a (non-active) model with its vectors and index; the number of vectors removed."""
    model = find_model(conn, name, dims)
    try:
        row = conn.execute(queries.DROP_MODEL, (model.name, model.dims)).fetchone()
        conn.commit()
    except psycopg.Error as exc:
        error = _sql_error(conn, exc)
        if error is None:
            raise
        raise error from None
    assert row is not None  # kb.drop_model returns the number of vectors dropped
    return int(row[0])


def model_settings(settings: Settings, model: Model) -> Settings:
    """The settings that embed with ``model`` (its provider, name, dims and stored config)."""
    changes: dict[str, Any] = {
        "embedding_provider": model.provider,
        "embedding_model": model.name,
        "embedding_dims": model.dims,
        # what changes its vectors, as registered (absent: none)
        "embedding_query_prompt": str(model.config.get("query_prompt") or ""),
        "embedding_document_prompt": str(model.config.get("document_prompt") or ""),
        "embedding_request_dimensions": bool(model.config.get("request_dimensions")),
    }
    if model.config.get("base_url"):
        changes["embedding_base_url"] = model.config["base_url"]
    if model.config.get("max_input_tokens"):
        changes["embedding_max_input_tokens"] = int(model.config["max_input_tokens"])
    key_env = model.config.get("api_key_env")
    if key_env:
        if not os.environ.get(key_env):
            raise ConfigError(
                f"model {model.name} reads its API key from ${key_env}, which is not set",
                hint=f"export {key_env}=...",
            )
        changes["embedding_api_key"] = os.environ[key_env]
    if model.provider not in ("local", "openai"):
        raise ConfigError(
            f"model {model.name} has provider {model.provider!r}; pgkb embeds with 'local' or "
            "'openai' only"
        )
    return settings.replace(**changes)


def settings_for_model(settings: Settings, name: str) -> Settings:
    """``settings`` with the embedding model set to the registered model ``name`` (for
    ``pgkb eval --model``: queries embedded by it, searches through its vectors)."""
    with connection(settings) as conn:
        model = find_model(conn, name)
    if model.missing:
        raise PgkbError(
            f"{model.missing} chunk(s) have no embedding of {model.name}: its figures would "
            "be too low",
            hint=f"run pgkb models reembed --model {model.name} first",
        )
    return model_settings(settings, model)


# --- re-embedding -------------------------------------------------------------------------------


@dataclasses.dataclass
class ReembedReport:
    model: str
    dims: int
    embedded: int = 0
    remaining: int = 0
    batches: int = 0
    index_rebuilt: bool = False
    """The model's HNSW index was built at the end: dropped for this bulk load, or found
    missing (``index_was_missing``)."""
    index_was_missing: bool = False
    """The index was missing when the run began: a killed run had dropped it."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def embed_text(chunker: Chunker, title: str, heading_path: str, content: str) -> str:
    """The text the model reads for a stored chunk: the prefix ingestion gives it (title and
    heading path, shortened to the chunk budget) + the content."""
    path = tuple(heading_path.split(" > ")) if heading_path else ()
    return str(chunker.embed_text(title, path, content))


def reembed(
    settings: Settings,
    name: str,
    *,
    dims: int | None = None,
    batch_size: int | None = None,
    wait: bool = True,
    progress: ProgressCallback | None = None,
    embedder: Embedder | None = None,
) -> ReembedReport:
    """Embed every chunk that has no vector of model ``name`` with it, beside the active model.

    Each batch is committed on its own: an interruption loses at most the batch in flight, and
    the next run starts with what is still missing. Vectors whose length differs from the
    model's declared dims stop the run before anything of that batch is stored."""
    size = batch_size or max(settings.embedding_batch_size, 1) * 4
    with connection(settings) as conn:
        model = find_model(conn, name, dims)
        report = ReembedReport(model.name, model.dims)
        with ingest_lock(conn, wait=wait, what="pgkb models reembed", progress=progress):
            model = find_model(conn, model.name, model.dims)  # fresh counts under the lock
            if model.missing == 0 and not _index_missing(model):
                return report
            if model.missing == 0:  # a killed run embedded everything, then lost the index
                with bulk_index(conn, model.id, settings, existing=model.embeddings) as bulk:
                    pass
                report.index_rebuilt = bulk.rebuilt
                report.index_was_missing = bulk.was_missing
                return report
            msettings = model_settings(settings, model)
            embedder = embedder or get_embedder(msettings)
            if embedder.dims != model.dims:
                raise ModelMismatchError(
                    f"the embedder for {model.name} is configured with {embedder.dims} dims, "
                    f"but the model is registered with {model.dims}"
                )
            chunker = Chunker(
                embedder,
                chunk_size(settings, embedder),
                settings.chunk_overlap,
                embed_heading_path=settings.embed_heading_path,
            )
            if progress:
                progress("start", {"total": model.missing, "model": model.name})
            with bulk_index(conn, model.id, settings, existing=model.embeddings) as bulk:
                # decided before the first batch: the whole count is known
                bulk.before_write(model.missing)
                _reembed_batches(conn, model, embedder, chunker, size, report, progress)
            report.index_rebuilt = bulk.rebuilt
            report.index_was_missing = bulk.was_missing
            if report.embedded:  # kb.embeddings grew: its planner statistics follow
                conn.execute(queries.FINISH_LOAD, (report.embedded,))
                conn.commit()
        report.remaining = find_model(conn, model.name, model.dims).missing
    return report


def _reembed_batches(
    conn: psycopg.Connection[Any],
    model: Model,
    embedder: Embedder,
    chunker: Chunker,
    size: int,
    report: ReembedReport,
    progress: ProgressCallback | None,
) -> None:
    """Embed and store, batch after batch (each committed), every chunk lacking a vector."""
    from pgvector import Vector

    after = 0
    while True:
        with conn.cursor(row_factory=class_row(queries.MissingChunk)) as cur:
            rows = cur.execute(queries.CHUNKS_MISSING_EMBEDDING, (model.id, size, after)).fetchall()
        conn.commit()
        if not rows:
            break
        texts = [embed_text(chunker, r.title, r.heading_path, r.content) for r in rows]
        try:
            vectors = embedder.embed(texts)
        except ModelMismatchError as exc:  # the API checked the dims for us
            raise _dims_error(model, _returned_dims(exc.message), report) from None
        if len(vectors) != len(texts):
            raise PgkbError(
                f"the embedding model {model.name} returned {len(vectors)} vectors for "
                f"{len(texts)} texts; nothing of this batch was stored"
            )
        for vector in vectors:
            if len(vector) != model.dims:
                raise _dims_error(model, str(len(vector)), report)
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                queries.STORE_EMBEDDING,
                [(model.id, Vector(v), r.chunk_id) for r, v in zip(rows, vectors, strict=True)],
            )
        report.embedded += len(rows)
        report.batches += 1
        after = rows[-1].chunk_id
        if progress:
            progress("batch", {"count": len(rows)})


def _returned_dims(message: str) -> str:

    found = re.search(r"returned (\d+)-dimensional", message)
    return found.group(1) if found else "other"


def _dims_error(model: Model, got: str, report: ReembedReport) -> ModelMismatchError:
    return ModelMismatchError(
        f"the embedding model {model.name} returned {got}-dimensional vectors, but it is "
        f"registered with {model.dims} dims; nothing of this batch was stored "
        f"({report.embedded} chunks embedded before it are kept)",
        hint="check the model's name and endpoint (pgkb models list), or drop it "
        "(pgkb models drop NAME) and add it again with the right --dims",
    )
