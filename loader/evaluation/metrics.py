"""Ranking metrics over one query: ``ranked`` ids best first, ``relevant`` ids with their grades.

Definitions (as in BEIR / pytrec_eval):
- recall@k = |relevant in top k| / |relevant|
- MRR@k    = 1 / rank of the first relevant id within the top k (0 if none)
- nDCG@k   = DCG@k / ideal DCG@k, DCG = sum over ranks r of (2^grade - 1) / log2(r + 1)
Ids repeated in ``ranked`` count at their first position only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def _dedupe(ranked: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in ranked:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    positives = {doc for doc, grade in relevant.items() if grade > 0}
    if not positives:
        return 0.0
    hits = sum(1 for doc in _dedupe(ranked)[:k] if doc in positives)
    return hits / len(positives)


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    for rank, doc in enumerate(_dedupe(ranked)[:k], start=1):
        if relevant.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    gains = [relevant.get(doc, 0) for doc in _dedupe(ranked)[:k]]
    dcg = sum((2**g - 1) / math.log2(r + 1) for r, g in enumerate(gains, start=1) if g > 0)
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(r + 1) for r, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0
