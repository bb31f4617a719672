"""Context building: neighbouring chunks merged into the best hits while the budget allows, and
the documents related to an answer (retrieved but not cited, then the document graph's
neighbours of the cited ones, within the question's category)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.answer.passages import Passage, RelatedDocument, estimate_tokens
from loader.db import queries
from loader.graph.catalogue import Neighbour, graph_neighbours, rank_related


def _merge(
    conn: psycopg.Connection[Any], chunk_id: int, before: int, after: int
) -> queries.MergedSpan | None:
    """``kb.merge_neighbors``: the chunk with ``before``/``after`` neighbours, overlap dropped."""
    with conn.cursor(row_factory=class_row(queries.MergedSpan)) as cur:
        return cur.execute(
            queries.MERGE_NEIGHBOURS, {"chunk_id": chunk_id, "before": before, "after": after}
        ).fetchone()


def _join_overlapping(left: str, right: str) -> str:
    """``left + right`` without the text they share (chunks overlap by a few tokens)."""
    left, right = left.rstrip(), right.lstrip()
    longest = min(len(left), len(right), 2000)
    for size in range(longest, 19, -1):
        if left.endswith(right[:size]):
            return left + right[size:]
    return left + "\n" + right


def expand_with_neighbours(
    conn: psycopg.Connection[Any],
    passages: Sequence[Passage],
    budget_tokens: int,
    *,
    expand_top: int = 3,
) -> list[Passage]:
    """The passages in rank order, with neighbouring chunks merged in while the budget allows.

    A hit's previous and next chunk are merged into it (the answer often runs across a chunk
    boundary) for the ``expand_top`` best hits, as long as the whole context stays within
    ``budget_tokens``. Passages of one document whose chunk ranges touch or overlap become one
    passage over the union of their ranges, joined by ``kb.merge_neighbors`` (which drops the
    chunker's overlap), so no text is sent twice.
    """
    used = sum(estimate_tokens(p.content) for p in passages)
    items: list[tuple[Passage, int]] = []  # (passage, chunk_index of its hit)
    for rank, passage in enumerate(passages):
        hit_index = passage.chunk_index
        if rank < expand_top and passage.chunk_id is not None and used < budget_tokens:
            span = _merge(conn, passage.chunk_id, 1, 1)
            if span is not None and span.chunk_start != span.chunk_end:
                first, last, text = span.chunk_start, span.chunk_end, span.content
                extra = estimate_tokens(text) - estimate_tokens(passage.content)
                if used + extra <= budget_tokens:
                    used += extra
                    passage = dataclasses.replace(
                        passage, content=text, chunk_index=first, chunk_end=last
                    )
        items.append((passage, hit_index))

    merged: list[tuple[Passage, int]] = []
    for passage, hit_index in items:
        for i, (earlier, earlier_hit) in enumerate(merged):
            if earlier.document_id != passage.document_id or not (
                passage.chunk_index <= earlier.last_index + 1
                and earlier.chunk_index <= passage.last_index + 1
            ):
                continue
            merged[i] = (_union(conn, earlier, earlier_hit, passage), earlier_hit)
            break
        else:
            merged.append((passage, hit_index))
    return [p for p, _ in merged]


def _union(conn: psycopg.Connection[Any], kept: Passage, hit_index: int, other: Passage) -> Passage:
    """``kept`` (the better ranked) widened to cover ``other``'s chunks too."""
    start = min(kept.chunk_index, other.chunk_index)
    end = max(kept.last_index, other.last_index)
    if (start, end) == (kept.chunk_index, kept.last_index):
        return kept
    span = None
    if kept.chunk_id is not None:
        span = _merge(conn, kept.chunk_id, hit_index - start, end - hit_index)
    if span is not None:
        start, end, content = span.chunk_start, span.chunk_end, span.content
    else:  # no chunk id to anchor on: join the texts
        first, second = (kept, other) if kept.chunk_index <= other.chunk_index else (other, kept)
        content = _join_overlapping(first.content, second.content)
    return dataclasses.replace(
        kept, content=content, chunk_index=start, chunk_end=end if end != start else None
    )


def fetch_neighbours(
    conn: psycopg.Connection[Any],
    passages: Sequence[Passage],
    *,
    category: str | None = None,
    known: Mapping[uuid.UUID, Sequence[Neighbour]] | None = None,
) -> dict[uuid.UUID, list[Neighbour]]:
    """The graph neighbours (one hop in ``kb.explore_graph``, only documents of ``category``
    when one is given) of the documents of ``passages`` not already in ``known``: what
    :func:`related_documents` reads, fetched before the answer is built."""
    known = known or {}
    missing = [d for d in dict.fromkeys(p.document_id for p in passages) if d not in known]
    filters = {"category": category} if category else None
    return graph_neighbours(conn, missing, filters=filters) if missing else {}


def related_documents(
    cited: Sequence[Passage],
    retrieved: Sequence[Passage],
    neighbours: Mapping[uuid.UUID, Sequence[Neighbour]],
) -> list[RelatedDocument]:
    """Documents retrieved but not cited, then graph neighbours of the cited ones (of the
    retrieved ones when none is cited), from the ``neighbours`` fetched before
    (:func:`fetch_neighbours`); reads nothing."""
    cited_ids = list(dict.fromkeys(p.document_id for p in cited))
    seen = set(cited_ids)
    related: list[RelatedDocument] = []
    for passage in retrieved:
        if passage.document_id not in seen:
            seen.add(passage.document_id)
            related.append(
                RelatedDocument(passage.document_id, passage.title, passage.source_uri, "retrieved")
            )
    anchor = cited_ids or list(dict.fromkeys(p.document_id for p in retrieved))
    for doc_id, title, source_uri, relation in rank_related(anchor, neighbours):
        if doc_id not in seen:
            seen.add(doc_id)
            related.append(RelatedDocument(doc_id, title, source_uri, relation))
    return related
