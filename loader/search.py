"""Retrieval from Python: a thin wrapper over the SQL functions ``kb.hybrid_search``,
``kb.vector_search`` and ``kb.keyword_search``.

All ranking happens in PostgreSQL; this module only passes the settings' knobs (candidates per
retriever, RRF k, weights, minimum similarity, keyword ranking) as bind parameters and turns the
rows into :class:`SearchHit` objects. Every mode returns the same columns: a retriever that did
not take part leaves its rank and score ``None``.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import psycopg
from psycopg.rows import class_row

from loader.errors import ModelMismatchError, PgkbError
from loader.settings import Settings

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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the document id as a string)."""
        data = dataclasses.asdict(self)
        data["document_id"] = str(self.document_id)
        return data


_COLUMNS = """chunk_id, document_id, title, source_uri, chunk_index, heading_path, content, score,
    vector_rank, vector_similarity, keyword_rank, keyword_score, category, metadata, token_count"""

# The statements this module sends (values always bound, never formatted into the text).
HYBRID_SQL = f"""
SELECT {_COLUMNS}
  FROM kb.hybrid_search(
           query_text => %(query_text)s,
           query_embedding => %(query_embedding)s,
           match_count => %(match_count)s,
           vector_candidates => %(vector_candidates)s,
           keyword_candidates => %(keyword_candidates)s,
           rrf_k => %(rrf_k)s,
           vector_weight => %(vector_weight)s,
           keyword_weight => %(keyword_weight)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           min_similarity => %(min_similarity)s,
           model => %(model)s,
           keyword_ranking => %(keyword_ranking)s)
"""

VECTOR_SQL = """
SELECT v.chunk_id, v.document_id, v.title, v.source_uri, v.chunk_index, v.heading_path, v.content,
       v.similarity AS score, v.rank AS vector_rank, v.similarity AS vector_similarity,
       NULL::integer AS keyword_rank, NULL::double precision AS keyword_score,
       d.category, d.metadata, c.token_count
  FROM kb.vector_search(
           query_embedding => %(query_embedding)s,
           match_count => %(match_count)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           min_similarity => %(min_similarity)s,
           model => %(model)s,
           ef_search => %(ef_search)s) AS v
  JOIN kb.chunks c ON c.id = v.chunk_id
  JOIN kb.documents d ON d.id = v.document_id
 ORDER BY v.rank
"""

KEYWORD_SQL = """
SELECT k.chunk_id, k.document_id, k.title, k.source_uri, k.chunk_index, k.heading_path, k.content,
       k.score, NULL::integer AS vector_rank, NULL::double precision AS vector_similarity,
       k.rank AS keyword_rank, k.score AS keyword_score,
       d.category, d.metadata, c.token_count
  FROM kb.keyword_search(
           query_text => %(query_text)s,
           match_count => %(match_count)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           keyword_ranking => %(keyword_ranking)s) AS k
  JOIN kb.chunks c ON c.id = k.chunk_id
  JOIN kb.documents d ON d.id = k.document_id
 ORDER BY k.rank
"""


def _filters(category: str | None, filters: Mapping[str, Any] | None) -> str:
    merged: dict[str, Any] = dict(filters or {})
    if category is not None:
        merged["category"] = category
    return json.dumps(merged)


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
    filters: Mapping[str, Any] | None = None,
) -> list[SearchHit]:
    """Search the knowledge base and return the best ``limit`` chunks (default
    ``settings.match_count``).

    ``query_embedding`` must come from the model in ``settings`` (it is checked against the model
    registered under ``settings.embedding_model``); ``None`` makes hybrid mode keyword-only.
    ``category`` and ``filters`` (keys: category, metadata, source) and ``document_ids`` narrow
    the search. Raises :class:`ModelMismatchError` when the embedding does not fit the model and
    :class:`PgkbError` for bad filters.
    """
    if mode not in MODES:
        raise PgkbError(f"unknown search mode {mode!r}", hint="use one of: " + ", ".join(MODES))
    if mode == "vector" and query_embedding is None:
        raise PgkbError("vector search needs a query embedding", hint="use mode 'keyword'")
    match_count = settings.match_count if limit is None else limit
    if match_count < 1:
        raise PgkbError(f"limit must be at least 1, got {match_count}")
    embedding = None
    if query_embedding is not None:
        import numpy as np
        from pgvector import Vector

        embedding = Vector(np.asarray(query_embedding, dtype=np.float32))
    params: dict[str, Any] = {
        "query_text": query_text,
        "query_embedding": embedding,
        "filters": _filters(category, {**settings.filters(), **(filters or {})}),
        "document_ids": _document_ids(document_ids),
        "min_similarity": settings.min_similarity,
        "model": settings.embedding_model,
        "keyword_ranking": settings.keyword_ranking,
        "ef_search": settings.hnsw_ef_search,
    }
    if mode == "hybrid":
        statement = HYBRID_SQL
        params.update(
            match_count=match_count,
            vector_candidates=max(settings.vector_candidates, match_count),
            keyword_candidates=max(settings.keyword_candidates, match_count),
            rrf_k=settings.rrf_k,
            vector_weight=settings.vector_weight,
            keyword_weight=settings.keyword_weight,
        )
    else:
        statement = VECTOR_SQL if mode == "vector" else KEYWORD_SQL
        params["match_count"] = match_count
    try:
        with conn.cursor(row_factory=class_row(SearchHit)) as cur:
            cur.execute(statement, params, prepare=False)
            hits = cur.fetchall()
    except (psycopg.DataError, psycopg.errors.NoDataFound) as exc:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.rollback()
        message = exc.diag.message_primary or str(exc)
        hint = exc.diag.message_hint
        if "dimensions" in message or "is not registered" in message:
            raise ModelMismatchError(message, hint=hint) from None
        raise PgkbError(message, hint=hint) from None
    return hits
