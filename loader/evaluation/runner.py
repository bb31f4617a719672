"""The evaluation runner: retrieval only, per retriever, scored at the document level.

For every query and every retriever (``vector``, ``keyword``, ``hybrid``) the runner asks the
search for enough chunks to fill :data:`DEPTH` distinct documents (doubling the request while
the results run out of documents before then), dedupes the chunk hits to documents in rank
order, and scores that ranking against the query's relevant documents with recall@k, MRR@10
and nDCG@10 (:mod:`loader.evaluation.metrics`). Answerable questions are scored; unanswerable
ones (no relevant documents) only feed the abstention figures: the gate
(:mod:`loader.answer.abstention`) sees the hybrid hits the answer path would see (the first
``match_count`` chunks) and the runner counts how many unanswerable questions it flags and how
many answerable ones it wrongly flags.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from loader.answer.abstention import AbstentionRule, apply_rule, compute_signals
from loader.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k
from loader.evaluation.questions import KINDS, Question, label_ranking
from loader.search import hit_value
from loader.settings import Settings

MODES = ("vector", "keyword", "hybrid")
DEPTH = 10
"""Documents ranked per query: MRR and nDCG are computed at 10."""
FIRST_LIMIT = 20
MAX_LIMIT = 400

Retrieve = Callable[[str, Sequence[float], str, int], Sequence[Any]]
"""``retrieve(query_text, query_embedding, mode, limit) -> hits`` (best first)."""
Progress = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class EvalQuery:
    """One query to score: its relevant documents as ``{label: grade}``."""

    id: str
    text: str
    kind: str
    relevant: Mapping[str, int]
    suffix_match: bool = True
    """Relevant labels match stored ``source_uri``s by path suffix (question files) or exactly."""

    @property
    def answerable(self) -> bool:
        return bool(self.relevant)

    @classmethod
    def from_question(cls, q: Question) -> EvalQuery:
        return cls(q.id, q.question, q.kind, {s: 1 for s in q.sources})


@dataclasses.dataclass
class QueryResult:
    query: EvalQuery
    rankings: dict[str, list[str]]
    """Mode -> labelled document ranking (best first, at most DEPTH)."""
    scores: dict[str, dict[str, float]]
    """Mode -> metric name -> value (answerable queries only)."""
    latency_ms: dict[str, float]
    signals: dict[str, Any] | None = None
    abstain: bool | None = None
    reason: str | None = None


def metric_names(k: int) -> tuple[str, str, str]:
    return (f"recall@{k}", f"mrr@{DEPTH}", f"ndcg@{DEPTH}")


def dedupe_documents(hits: Sequence[Any]) -> list[str]:
    """The ``source_uri``s of ``hits`` in rank order, each once."""
    seen: set[str] = set()
    out: list[str] = []
    for hit in hits:
        uri = str(hit_value(hit, "source_uri"))
        if uri not in seen:
            seen.add(uri)
            out.append(uri)
    return out


def ranked_documents(
    retrieve: Retrieve,
    text: str,
    embedding: Sequence[float],
    mode: str,
    first_limit: int = FIRST_LIMIT,
) -> tuple[list[str], list[Any]]:
    """Document ranking of one query through ``mode``, and the hits of the first request.

    The first request asks for ``first_limit`` chunks (the runner passes the configured
    candidates per retriever, so the top of the ranking is exactly what the configured pipeline
    returns). While those chunks hold fewer than DEPTH documents and more may exist, it asks
    for twice as many and appends the documents it had not seen, keeping the first order.
    """
    limit = max(1, first_limit)
    docs: list[str] = []
    first_hits: list[Any] | None = None
    while True:
        hits = list(retrieve(text, embedding, mode, limit))
        if first_hits is None:
            first_hits = hits
        for uri in dedupe_documents(hits):
            if uri not in docs:
                docs.append(uri)
        if len(docs) >= DEPTH or len(hits) < limit or limit >= MAX_LIMIT:
            return docs[:DEPTH], first_hits
        limit *= 2


def score_ranking(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> dict[str, float]:
    recall, mrr, ndcg = metric_names(k)
    return {
        recall: recall_at_k(ranking, relevant, k),
        mrr: mrr_at_k(ranking, relevant, DEPTH),
        ndcg: ndcg_at_k(ranking, relevant, DEPTH),
    }


def run_queries(
    conn: psycopg.Connection[Any],
    settings: Settings,
    queries: Sequence[EvalQuery],
    *,
    embed_query: Callable[[str], Sequence[float]],
    retrieve: Retrieve,
    k: int = 5,
    modes: Sequence[str] = MODES,
    abstention: bool = True,
    progress: Progress | None = None,
    embed: Callable[[Sequence[str]], Sequence[Sequence[float]]] | None = None,
) -> list[QueryResult]:
    """Retrieve and score every query through every mode; collect the abstention signals
    (``embed``, the model's batch function, for ``focus_coverage``)."""
    results: list[QueryResult] = []
    first_limit = max(
        settings.match_count, min(settings.vector_candidates, settings.keyword_candidates)
    )
    started = time.monotonic()
    last_report = started
    for index, query in enumerate(queries, start=1):
        embedding = embed_query(query.text)
        rankings: dict[str, list[str]] = {}
        scores: dict[str, dict[str, float]] = {}
        latency: dict[str, float] = {}
        hybrid_hits: list[Any] = []
        for mode in modes:
            t0 = time.perf_counter()
            docs, hits = ranked_documents(retrieve, query.text, embedding, mode, first_limit)
            latency[mode] = (time.perf_counter() - t0) * 1000
            if mode == "hybrid":
                hybrid_hits = hits[: settings.match_count]
            expected = list(query.relevant)
            labelled = label_ranking(docs, expected) if query.suffix_match else docs
            rankings[mode] = labelled
            if query.answerable:
                scores[mode] = score_ranking(labelled, query.relevant, k)
        result = QueryResult(query, rankings, scores, latency)
        if abstention and "hybrid" in modes:
            result.signals = compute_signals(conn, query.text, hybrid_hits, embed=embed)
            conn.rollback()
        results.append(result)
        now = time.monotonic()
        if progress and (now - last_report >= 2 or index == len(queries)):
            last_report = now
            rate = index / max(now - started, 1e-9)
            progress(f"evaluated {index}/{len(queries)} queries ({rate:.1f}/s)")
    return results


def apply_abstention(results: Sequence[QueryResult], rule: AbstentionRule) -> None:
    """Fill in each result's verdict under ``rule`` (signals must have been collected)."""
    for result in results:
        if result.signals is None:
            continue
        if not result.signals.get("hits", 1):
            result.abstain, result.reason = True, "retrieval found nothing"
            continue
        decision = apply_rule(rule, result.signals)
        result.abstain, result.reason = decision.abstain, decision.reason


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, math.ceil(p / 100 * len(ordered)) - 1)
    return ordered[rank]


def aggregate(
    results: Sequence[QueryResult], k: int, modes: Sequence[str] = MODES
) -> dict[str, Any]:
    """Mean metrics per retriever, overall (answerable queries) and per kind, and latency."""
    names = metric_names(k)
    retrievers: dict[str, Any] = {}
    order = {kind: index for index, kind in enumerate(KINDS)}
    kinds = sorted(
        {r.query.kind for r in results if r.query.answerable},
        key=lambda kind: (order.get(kind, len(order)), kind),
    )
    for mode in modes:
        scored = [r for r in results if mode in r.scores]
        overall = {n: round(_mean([r.scores[mode][n] for r in scored]), 4) for n in names}
        overall["queries"] = len(scored)
        by_kind = {}
        for kind in kinds:
            of_kind = [r for r in scored if r.query.kind == kind]
            entry = {n: round(_mean([r.scores[mode][n] for r in of_kind]), 4) for n in names}
            entry["queries"] = len(of_kind)
            by_kind[kind] = entry
        latencies = [r.latency_ms[mode] for r in results if mode in r.latency_ms]
        retrievers[mode] = {
            "overall": overall,
            "by_kind": by_kind,
            "latency_ms": {
                "p50": round(_percentile(latencies, 50), 2),
                "p95": round(_percentile(latencies, 95), 2),
            },
        }
    return retrievers


def abstention_summary(results: Sequence[QueryResult], rule: AbstentionRule) -> dict[str, Any]:
    judged = [r for r in results if r.abstain is not None]
    unanswerable = [r for r in judged if not r.query.answerable]
    answerable = [r for r in judged if r.query.answerable]
    caught = [r.query.id for r in unanswerable if r.abstain]
    missed = [r.query.id for r in unanswerable if not r.abstain]
    wrong = [r.query.id for r in answerable if r.abstain]
    return {
        "rule": rule.describe(),
        "rule_source": rule.source,
        "unanswerable": len(unanswerable),
        "answerable": len(answerable),
        "unanswerable_flagged": round(len(caught) / len(unanswerable), 4) if unanswerable else None,
        "answerable_flagged": round(len(wrong) / len(answerable), 4) if answerable else None,
        "missed_unanswerable": missed,
        "wrongly_flagged": wrong,
    }


def relevant_ranks(ranking: Sequence[str], relevant: Mapping[str, int]) -> dict[str, int | None]:
    """Rank (1-based, within the DEPTH documents ranked) of every relevant document; None when
    it is not among them. The eval gate compares these per question."""
    position: dict[str, int] = {}
    for index, doc in enumerate(ranking, start=1):
        position.setdefault(doc, index)
    return {doc: position.get(doc) for doc in sorted(relevant) if relevant[doc] > 0}


def per_query(results: Sequence[QueryResult], modes: Sequence[str] = MODES) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        row: dict[str, Any] = {"id": r.query.id, "kind": r.query.kind, "question": r.query.text}
        row["relevant"] = sorted(r.query.relevant)
        for mode in modes:
            row[mode] = {"top": r.rankings.get(mode, [])[:5], **r.scores.get(mode, {})}
            if r.query.answerable:
                row[mode]["ranks"] = relevant_ranks(r.rankings.get(mode, []), r.query.relevant)
        if r.query.answerable and any(g != 1 for g in r.query.relevant.values()):
            row["grades"] = dict(r.query.relevant)
        if r.abstain is not None:
            row["abstain"] = r.abstain
            row["reason"] = r.reason
            row["signals"] = {
                key: value for key, value in (r.signals or {}).items() if not key.endswith("_list")
            }
        rows.append(row)
    return rows
