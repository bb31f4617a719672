"""Deriving the abstention rule from labelled questions (``pgkb eval --calibrate``).

Input: the retrieval signals of every question
(:func:`loader.answer.abstention.compute_signals`) and whether the corpus can answer it.
Output: an :class:`~loader.answer.abstention.AbstentionRule`, a disjunction of at most
``max_clauses`` clauses of one or two threshold tests, learnt greedily:

1. candidate tests: for every signal, a threshold halfway between each two neighbouring
   observed values, in the direction that points at "unanswerable" (few hits covered, low
   similarity, unknown names present, ...);
2. candidate clauses: every test alone and every pair of tests on different signals;
3. repeatedly add the clause that flags the most not-yet-flagged unanswerable questions while
   the rule as a whole wrongly flags at most ``max_false_positive_rate`` of the answerable ones
   of every group; ties go to fewer tests, fewer false flags, then the widest margin around the
   threshold. A clause must add at least ``min_new`` unanswerable questions (10% of them, at
   least one), so the rule does not grow a clause per outlier.

Samples may come in groups (``Sample.group``: one question set, one vocabulary each). Then the
false-flag bound holds in every group on its own, and a flagged unanswerable question counts
1 / (the unanswerable questions of its group): each vocabulary weighs the same whatever its
size, so the rule that wins is the one that catches unanswerable questions in all of them.

With a handful of unanswerable questions any learnt rule can overfit: check it on held-out
questions (``pgkb eval --calibrate --holdout FILE``) before trusting the figures.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from loader.answer.abstention import AbstentionRule, Condition

# For each signal: the operator that points at "unanswerable".
DIRECTIONS: dict[str, str] = {
    "unknown_names": ">=",
    "unknown_terms": ">=",
    "coverage": "<",
    "top_similarity": "<",
    "leg_overlap": "<",
    "keyword_hits": "<",
    "score_gap": "<",
    "unknown_share": ">=",
    "passage_coverage": "<",
    "relative_similarity": "<",
    "leg_agreement": "<",
    "focus_coverage": "<",
}


@dataclasses.dataclass(frozen=True)
class Sample:
    id: str
    signals: Mapping[str, Any]
    unanswerable: bool
    group: str = ""
    """The question set (vocabulary) the sample comes from."""


@dataclasses.dataclass(frozen=True)
class _Candidate:
    conditions: tuple[Condition, ...]
    mask: int
    margin: float


MAX_THRESHOLDS = 40
"""Candidate thresholds per signal at most (evenly spread over the observed values): enough to
place a cut anywhere that matters, few enough that pairs of tests stay cheap to enumerate."""


def _thresholds(values: Sequence[float], op: str) -> list[tuple[float, float]]:
    """(threshold, margin) pairs: midpoints between neighbouring distinct values."""
    distinct = sorted(set(values))
    if len(distinct) < 2:
        return []
    if len(distinct) > MAX_THRESHOLDS + 1:
        step = (len(distinct) - 1) / MAX_THRESHOLDS
        distinct = sorted({distinct[round(i * step)] for i in range(MAX_THRESHOLDS + 1)})
    spread = (distinct[-1] - distinct[0]) or 1.0
    out = []
    for low, high in itertools.pairwise(distinct):
        if op == ">=":
            # integer-valued counts: "x >= high" separates high from low
            out.append((high, (high - low) / spread))
        else:
            out.append(((low + high) / 2, (high - low) / spread))
    return out


def candidate_conditions(
    samples: Sequence[Sample], directions: Mapping[str, str] | None = None
) -> list[tuple[Condition, int, float]]:
    """Every single test worth considering, with the bit mask of the samples it flags."""
    out = []
    for signal, op in (directions or DIRECTIONS).items():
        values = [s.signals.get(signal) for s in samples]
        numeric = [float(v) for v in values if v is not None]
        for threshold, margin in _thresholds(numeric, op):
            condition = Condition(signal, op, round(threshold, 4))
            mask = 0
            for i, sample in enumerate(samples):
                if condition.holds(sample.signals):
                    mask |= 1 << i
            out.append((condition, mask, margin))
    return out


def calibrate(
    samples: Sequence[Sample],
    *,
    max_false_positive_rate: float = 0.05,
    max_clauses: int = 3,
    min_new: int | None = None,
    directions: Mapping[str, str] | None = None,
) -> tuple[AbstentionRule, dict[str, Any]]:
    """Learn the rule; returns it and what it achieves on ``samples``."""
    positives = 0
    negatives = 0
    group_negatives: dict[str, int] = {}
    group_positives: dict[str, int] = {}
    for i, sample in enumerate(samples):
        if sample.unanswerable:
            positives |= 1 << i
            group_positives[sample.group] = group_positives.get(sample.group, 0) | 1 << i
        else:
            negatives |= 1 << i
            group_negatives[sample.group] = group_negatives.get(sample.group, 0) | 1 << i
    n_pos, n_neg = positives.bit_count(), negatives.bit_count()
    if n_pos == 0 or n_neg == 0:
        raise ValueError("calibration needs both answerable and unanswerable questions")
    allowed = {
        group: (mask, math.floor(max_false_positive_rate * mask.bit_count() + 1e-9))
        for group, mask in group_negatives.items()
    }
    # each flagged unanswerable question weighs 1 / (its group's unanswerable questions)
    weights = [(mask, 1 / mask.bit_count()) for mask in group_positives.values()]
    need = min_new if min_new is not None else max(1, math.ceil(0.1 * n_pos))

    singles = candidate_conditions(samples, directions)
    candidates = [_Candidate((c,), m, g) for c, m, g in singles]
    for (c1, m1, g1), (c2, m2, g2) in itertools.combinations(singles, 2):
        if c1.signal == c2.signal:
            continue
        mask = m1 & m2
        if mask & positives:
            candidates.append(_Candidate((c1, c2), mask, min(g1, g2)))

    chosen: list[_Candidate] = []
    flagged = 0
    for _ in range(max_clauses):
        best: tuple[Any, ...] | None = None
        best_candidate: _Candidate | None = None
        for cand in candidates:
            union = flagged | cand.mask
            if any((union & mask).bit_count() > limit for mask, limit in allowed.values()):
                continue
            false_flags = (union & negatives).bit_count()
            new = cand.mask & positives & ~flagged
            if new.bit_count() < need:
                continue
            gain = round(sum((new & mask).bit_count() * w for mask, w in weights), 9)
            key = (gain, -len(cand.conditions), -false_flags, cand.margin)
            if best is None or key > best:
                best, best_candidate = key, cand
        if best_candidate is None:
            break
        chosen.append(best_candidate)
        flagged |= best_candidate.mask

    caught = (flagged & positives).bit_count()
    wrong = (flagged & negatives).bit_count()
    report = {
        "questions": len(samples),
        "unanswerable": n_pos,
        "answerable": n_neg,
        "max_false_positive_rate": max_false_positive_rate,
        "unanswerable_flagged": round(caught / n_pos, 4),
        "answerable_flagged": round(wrong / n_neg, 4),
        "wrongly_flagged": [
            s.id for i, s in enumerate(samples) if flagged >> i & 1 and not s.unanswerable
        ],
        "missed_unanswerable": [
            s.id for i, s in enumerate(samples) if s.unanswerable and not flagged >> i & 1
        ],
    }
    rule = AbstentionRule(
        tuple(c.conditions for c in chosen), source="calibrated", calibration=report
    )
    return rule, report


def rule_rates(rule: AbstentionRule, samples: Sequence[Sample]) -> dict[str, Any]:
    """What ``rule`` does on ``samples`` (e.g. held-out questions)."""
    unanswerable = [s for s in samples if s.unanswerable]
    answerable = [s for s in samples if not s.unanswerable]
    caught = [s.id for s in unanswerable if rule.matching_clause(s.signals) is not None]
    wrong = [s.id for s in answerable if rule.matching_clause(s.signals) is not None]
    return {
        "questions": len(samples),
        "unanswerable": len(unanswerable),
        "answerable": len(answerable),
        "unanswerable_flagged": round(len(caught) / len(unanswerable), 4) if unanswerable else None,
        "answerable_flagged": round(len(wrong) / len(answerable), 4) if answerable else None,
        "wrongly_flagged": wrong,
        "missed_unanswerable": [s.id for s in unanswerable if s.id not in caught],
    }
