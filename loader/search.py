"""Retrieval from Python: a thin wrapper over the SQL functions ``kb.hybrid_search``,
``kb.vector_search`` and ``kb.keyword_search``.

All ranking happens in PostgreSQL; this module only passes the settings' knobs (candidates per
retriever, RRF k, weights, minimum similarity, keyword ranking) as bind parameters and turns the
rows into :class:`SearchHit` objects. Every mode returns the same columns: a retriever that did
not take part leaves its rank and score ``None``.

With a reranker configured (``rerank_provider``), hybrid search fetches the fused top
``rerank_candidates``, has the reranker order them (:mod:`loader.providers.rerank`) and returns
its best ``limit``, each with its ``rerank_score``; when the reranker fails or times out, the
fused order is kept and a note says so (``notes``, and a warning on stderr).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import psycopg
from psycopg.rows import class_row

from loader import telemetry
from loader.db import queries
from loader.errors import PgkbError, database_error
from loader.filters import SearchFilters
from loader.providers.rerank import RerankError, get_reranker
from loader.settings import Settings

log = logging.getLogger(__name__)

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")


@dataclasses.dataclass(frozen=True)
class SearchHit:
    """One retrieved chunk, as ``kb.hybrid_search`` returns it.

    ``score`` is the fused RRF score in hybrid mode, the cosine similarity in vector mode and the
    keyword score (BM25 or ts_rank) in keyword mode. ``vector_similarity`` is the cosine
    similarity (1 - cosine distance) when the chunk was among the vector candidates.
    """

    chunk_id: int
    document_id: uuid.UUID
    title: str
    source_uri: str
    chunk_index: int
    heading_path: str
    content: str
    score: float
    vector_rank: int | None
    vector_similarity: float | None
    keyword_rank: int | None
    keyword_score: float | None
    category: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    token_count: int | None = None
    rerank_score: float | None = None
    """The reranker's relevance score (hybrid mode with ``rerank_provider`` set; None when no
    reranker ran or it failed and the fused order was kept). Its scale is the reranker's own."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the document id as a string)."""
        data = dataclasses.asdict(self)
        data["document_id"] = str(self.document_id)
        return data


def hit_value(hit: SearchHit | Mapping[str, Any], name: str) -> Any:
    """Field ``name`` of a hit given as a :class:`SearchHit` or as a mapping (test fixtures and
    the eval's hand-made hits), None when absent: the one accessor for either shape."""
    if isinstance(hit, Mapping):
        return hit.get(name)
    return getattr(hit, name, None)


def _filters(
    settings: Settings, category: str | None, filters: SearchFilters | Mapping[str, Any] | None
) -> str:
    """The filters object SQL gets: the ``search_filters`` setting, then ``filters``, then
    ``category`` on top."""
    given = (
        filters
        if filters is None or isinstance(filters, SearchFilters)
        else SearchFilters.parse(filters, where="search filters")
    )
    merged = settings.filters().merged(given).merged(SearchFilters.of(category=category))
    return merged.to_json()


def _document_ids(document_ids: Sequence[uuid.UUID | str] | None) -> list[uuid.UUID] | None:
    if document_ids is None:
        return None
    ids: list[uuid.UUID] = []
    for value in document_ids:
        try:
            ids.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise PgkbError(
                f"document id {value!r} is not a UUID",
                hint="use the document_id shown by `pgkb search --json`",
            ) from None
    return ids


def vector_text(values: Sequence[float]) -> str:
    """``values`` in pgvector's text form (``[0.1,-0.2,...]``): each float's shortest repr,
    which reads back as the same float32."""
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def search(
    conn: psycopg.Connection[Any],
    query_text: str,
    query_embedding: Sequence[float] | None,
    *,
    settings: Settings,
    mode: Mode = "hybrid",
    limit: int | None = None,
    category: str | None = None,
    document_ids: Sequence[uuid.UUID | str] | None = None,
    filters: SearchFilters | Mapping[str, Any] | None = None,
    rerank: bool | None = None,
    notes: list[str] | None = None,
    min_similarity: float | None = None,
) -> list[SearchHit]:
    """Search the knowledge base and return the best ``limit`` chunks (default
    ``settings.match_count``), none whose cosine similarity is below ``min_similarity`` (None:
    the setting).

    ``rerank`` (hybrid mode): have the configured reranker order the fused top
    ``rerank_candidates`` (None: when ``rerank_provider`` is set; True without one is an error);
    a failed rerank keeps the fused order and appends why to ``notes``.

    ``query_embedding`` must come from the model in ``settings`` (it is checked against the model
    registered under ``settings.embedding_model``); ``None`` makes hybrid mode keyword-only.
    ``category`` and ``filters`` (keys: category, metadata, source) and ``document_ids`` narrow
    the search. Raises :class:`ModelMismatchError` when the embedding does not fit the model and
    :class:`PgkbError` for bad filters.
    """
    with telemetry.span("pgkb.search", mode=mode, limit=limit) as span:
        hits = _search(
            conn, query_text, query_embedding, settings=settings, mode=mode, limit=limit,
            category=category, document_ids=document_ids, filters=filters, rerank=rerank,
            notes=notes, min_similarity=min_similarity,
        )  # fmt: skip
        span.set(hits=len(hits), reranked=any(h.rerank_score is not None for h in hits))
    return hits


def _search(
    conn: psycopg.Connection[Any],
    query_text: str,
    query_embedding: Sequence[float] | None,
    *,
    settings: Settings,
    mode: Mode,
    limit: int | None,
    category: str | None,
    document_ids: Sequence[uuid.UUID | str] | None,
    filters: SearchFilters | Mapping[str, Any] | None,
    rerank: bool | None,
    notes: list[str] | None,
    min_similarity: float | None = None,
) -> list[SearchHit]:
    if mode not in MODES:
        raise PgkbError(f"unknown search mode {mode!r}", hint="use one of: " + ", ".join(MODES))
    if mode == "vector" and query_embedding is None:
        raise PgkbError("vector search needs a query embedding", hint="use mode 'keyword'")
    match_count = settings.match_count if limit is None else limit
    if match_count < 1:
        raise PgkbError(f"limit must be at least 1, got {match_count}")
    reranker = _reranker(settings, mode, rerank)
    wanted = match_count
    if reranker is not None:
        match_count = max(settings.rerank_candidates, match_count)
    embedding = None if query_embedding is None else vector_text(query_embedding)
    params: dict[str, Any] = {
        "query_text": query_text,
        "query_embedding": embedding,
        "filters": _filters(settings, category, filters),
        "document_ids": _document_ids(document_ids),
        "min_similarity": settings.min_similarity if min_similarity is None else min_similarity,
        "model": settings.embedding_model,
        "keyword_ranking": settings.keyword_ranking,
        "ef_search": settings.hnsw_ef_search,
    }
    if mode == "hybrid":
        statement = queries.HYBRID_SEARCH
        params.update(
            match_count=match_count,
            vector_candidates=max(settings.vector_candidates, match_count),
            keyword_candidates=max(settings.keyword_candidates, match_count),
            rrf_k=settings.rrf_k,
            vector_weight=settings.vector_weight,
            keyword_weight=settings.keyword_weight,
            max_per_document=settings.max_per_document,
            exact_keyword_weight=settings.exact_keyword_weight,
            keyword_confidence=settings.keyword_confidence,
            lead_slot=settings.lead_slot,
        )
    else:
        statement = queries.VECTOR_SEARCH if mode == "vector" else queries.KEYWORD_SEARCH
        params["match_count"] = match_count
    try:
        with conn.cursor(row_factory=class_row(SearchHit)) as cur:
            cur.execute(statement, params, prepare=False)
            hits = cur.fetchall()
    except psycopg.Error as exc:
        # by code: pgkb's own (a model the database does not know or of other dimensions is a
        # ModelMismatchError, see loader.errors.SQLSTATES), or PostgreSQL's data exceptions
        error = database_error(exc)
        if error is None and not isinstance(exc, psycopg.DataError):
            raise
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.rollback()
        if error is None:
            error = PgkbError(exc.diag.message_primary or str(exc), hint=exc.diag.message_hint)
        raise error from None
    if reranker is not None:
        return rerank_hits(reranker, query_text, hits, wanted, notes)
    return hits


def _reranker(settings: Settings, mode: Mode, rerank: bool | None) -> Any:
    if rerank is False or mode != "hybrid":
        if rerank and mode != "hybrid":
            raise PgkbError(f"reranking applies to hybrid search, not {mode}")
        return None

    reranker = get_reranker(settings)
    if reranker is None and rerank:
        raise PgkbError(
            "no reranker is configured", hint="set PGKB_RERANK_PROVIDER and PGKB_RERANK_MODEL"
        )
    return reranker


def passage_text(hit: SearchHit) -> str:
    """What a reranker reads of a hit: its heading path (title first), then its text."""
    return f"{hit.heading_path}\n\n{hit.content}" if hit.heading_path else hit.content


def rerank_hits(
    reranker: Any,
    query_text: str,
    hits: Sequence[SearchHit],
    limit: int,
    notes: list[str] | None = None,
) -> list[SearchHit]:
    """The best ``limit`` of ``hits`` in ``reranker``'s order, with their ``rerank_score``; on
    failure the fused order (the first ``limit``), with a note and a warning saying so."""
    if not hits:
        return []
    try:
        ranked = reranker.rerank(query_text, [passage_text(h) for h in hits], limit)
    except RerankError as exc:
        note = f"the reranker failed ({exc.message}); results are in the fused order"
        log.warning("%s", note)
        telemetry.event("rerank_fallback")
        if notes is not None:
            notes.append(note)
        return list(hits[:limit])
    return [dataclasses.replace(hits[r.index], rerank_score=r.score) for r in ranked[:limit]]
