"""The one retrieval step every answer starts with: embed the question (or degrade to keywords
when the embedding model fails), hybrid search, the abstention gate, and the graph neighbours of
what was found (for the answer's related documents, so building the answer reads nothing).

:func:`retrieve` is shared by the single-shot answer and the reader agent; :func:`settle` gives
the answer that needs no chat model (abstained before any model call, or extractive when none is
configured).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import psycopg

from loader.answer.abstention import AbstentionDecision, decide
from loader.answer.abstention.focus import Embed
from loader.answer.context import fetch_neighbours
from loader.answer.passages import Passage
from loader.answer.prompt import CONFIGURE_HINT, prepare_question
from loader.answer.result import Answer, abstained_answer, fallback_answer
from loader.errors import PgkbError
from loader.filters import SearchFilters
from loader.graph.catalogue import Neighbour
from loader.providers.chat import ChatModel
from loader.search import SearchHit, search
from loader.settings import Settings

log = logging.getLogger(__name__)


class QueryEmbedder(Protocol):
    def embed_query(self, text: str) -> Sequence[float]: ...


Gate = Callable[[psycopg.Connection[Any], Settings, str, Sequence[SearchHit]], AbstentionDecision]
"""``gate(conn, settings, query_text, hits) -> decision``: should the answer abstain?"""


def batch_embed(embedder: QueryEmbedder) -> Embed | None:
    """The embedder's batch function (``embed``) for the gate's ``focus_coverage``, or None when
    it has none."""
    embed = getattr(embedder, "embed", None)
    return embed if callable(embed) else None


def embed_query(embedder: QueryEmbedder, text: str, notes: list[str]) -> Sequence[float] | None:
    """The query's embedding, or None (keyword-only search) when the embedding model fails."""
    try:
        return embedder.embed_query(text)
    except PgkbError as exc:
        log.warning("query embedding failed: %s", exc.message)
        notes.append(f"the embedding model failed ({exc.message}); searched by keywords only")
        return None


def search_passages(
    conn: psycopg.Connection[Any],
    settings: Settings,
    query_text: str,
    query_embedding: Sequence[float] | None,
    *,
    limit: int | None = None,
    category: str | None = None,
    document_ids: Sequence[uuid.UUID] | None = None,
    filters: SearchFilters | None = None,
    notes: list[str] | None = None,
) -> tuple[list[SearchHit], list[Passage]]:
    """Hybrid search; returns the raw hits (for the abstention gate) and their passages.

    ``filters`` (``pgkb ask --source/--meta``) on top of the ``search_filters`` setting, and the
    ``min_similarity`` setting, narrow every search here, and the configured reranker orders the
    fused candidates (a failed rerank keeps the fused order and appends why to ``notes``), for
    the single answer and the agent alike."""
    hits = search(
        conn,
        query_text,
        query_embedding,
        settings=settings,
        mode="hybrid",
        limit=limit,
        category=category,
        document_ids=list(document_ids) if document_ids else None,
        filters=filters,
        notes=notes,
    )
    return list(hits), [Passage.from_hit(h) for h in hits]


@dataclasses.dataclass
class Retrieval:
    """What the retrieval step found for one question."""

    question: str
    """The cleaned question."""
    query_text: str
    """The text retrieval read (the question, cut to ``MAX_QUERY_CHARS``)."""
    embedding: Sequence[float] | None
    """None when the embedding model failed (keyword-only search; see ``notes``)."""
    candidates: list[Passage]
    """Every passage searched for (``limit``), best first."""
    hits: list[SearchHit]
    """The top ``match_count`` hits the gate judged."""
    passages: list[Passage]
    """The passages of ``hits``."""
    decision: AbstentionDecision
    notes: list[str]
    category: str | None = None
    """The question's scope: every later read (tools, related documents) stays inside it."""
    filters: SearchFilters | None = None
    """What else narrows every search for this question (``--source``, ``--meta``)."""
    neighbours: dict[uuid.UUID, list[Neighbour]] = dataclasses.field(default_factory=dict)
    """Graph neighbours of the documents of ``candidates`` (within ``category``), fetched here
    so that building the answer reads nothing (its related documents)."""


def retrieve(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    *,
    embedder: QueryEmbedder,
    category: str | None = None,
    gate: Gate | None = None,
    limit: int | None = None,
    filters: SearchFilters | None = None,
) -> Retrieval:
    """Embed (or degrade), hybrid search for ``limit`` (default ``match_count``) passages, and
    ask the gate about the top ``match_count``. An empty question is an error."""
    question, query_text = prepare_question(question)
    notes: list[str] = []
    embedding = embed_query(embedder, query_text, notes)
    wide_hits, wide = search_passages(
        conn,
        settings,
        query_text,
        embedding,
        limit=limit or settings.match_count,
        category=category,
        filters=filters,
        notes=notes,
    )
    hits, passages = wide_hits[: settings.match_count], wide[: settings.match_count]
    if gate is None:
        decision = decide(conn, settings, query_text, hits, embed=batch_embed(embedder))
    else:
        decision = gate(conn, settings, query_text, hits)
    neighbours = fetch_neighbours(conn, wide, category=category)
    return Retrieval(
        question,
        query_text,
        embedding,
        wide,
        hits,
        passages,
        decision,
        notes,
        category,
        filters,
        neighbours,
    )


def gate_record(retrieval: Retrieval) -> dict[str, Any]:
    """What the abstention gate decided, as every answer's ``abstention`` carries it: the
    ``reason`` (why it abstained, or that the signals look answerable) and the ``signals``."""
    decision = retrieval.decision
    reason = decision.reason if retrieval.hits else "retrieval found nothing"
    return {"reason": reason, "signals": dict(decision.signals)}


def settle(retrieval: Retrieval, client: ChatModel | None) -> Answer | None:
    """The answer when no model call is needed: "I don't know" when retrieval is too weak (before
    any model call), the extractive answer when no chat model is configured; else None."""
    decision = retrieval.decision
    if not retrieval.hits or decision.abstain:
        reason = decision.reason if decision.abstain else "retrieval found nothing"
        return abstained_answer(
            retrieval.question,
            retrieval.passages,
            reason,
            decision.signals,
            neighbours=retrieval.neighbours,
        )
    if client is None:
        return fallback_answer(
            retrieval.question,
            retrieval.passages,
            mode="extractive",
            neighbours=retrieval.neighbours,
            hint=CONFIGURE_HINT,
        )
    return None
