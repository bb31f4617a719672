"""The abstention gate's decision: abstain or not on one query, and why.

:func:`decide` computes the query's signals (:mod:`.signals`) and applies the rule in force
(:mod:`.rule`); no hits at all always abstains and ``abstention = false`` turns the gate off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from loader.answer.abstention.focus import Embed
from loader.answer.abstention.rule import AbstentionRule, Condition, load_rule
from loader.answer.abstention.signals import compute_signals
from loader.settings import Settings


@dataclasses.dataclass
class AbstentionDecision:
    """The gate's verdict on one query: abstain or not, why, and the signals it saw."""

    abstain: bool
    reason: str
    signals: dict[str, Any]


def apply_rule(rule: AbstentionRule, signals: dict[str, Any]) -> AbstentionDecision:
    """The verdict of ``rule`` on already computed ``signals``."""
    clause = rule.matching_clause(signals)
    if clause is None:
        return AbstentionDecision(False, "retrieval signals look answerable", signals)
    reason = " and ".join(_explain(c, signals) for c in clause)
    return AbstentionDecision(True, reason, signals)


def _explain(condition: Condition, signals: Mapping[str, Any]) -> str:
    if condition.signal == "unknown_names" and signals.get("unknown_name_list"):
        return "the corpus never mentions " + ", ".join(signals["unknown_name_list"])
    if condition.signal == "unknown_terms" and signals.get("unknown_term_list"):
        return "the corpus has no word " + ", ".join(signals["unknown_term_list"])
    if condition.signal == "unknown_share" and signals.get("unknown_term_list"):
        share = float(signals.get("unknown_share") or 0)
        return (
            f"{share:.0%} of the question's weight (unknown_share) is in words the corpus "
            "never uses: " + ", ".join(signals["unknown_term_list"])
        )
    if condition.signal == "focus_coverage" and signals.get("focus_coverage") is not None:
        missing = [w for w, held in (signals.get("focus_words") or {}).items() if not held]
        return (
            f"the closest passages do not speak of {', '.join(missing) or 'the question'} "
            f"(focus_coverage {float(signals['focus_coverage']):.2f} {condition.op} "
            f"{condition.value:g})"
        )
    if condition.signal == "passage_coverage" and signals.get("passage_coverage") is not None:
        share = float(signals["passage_coverage"])
        reason = (
            f"the closest passages hold {share:.0%} of the question's words by weight "
            f"(passage_coverage {condition.op} {condition.value:g})"
        )
        if signals.get("unknown_name_list"):
            reason += "; the corpus never mentions " + ", ".join(signals["unknown_name_list"])
        return reason
    if condition.signal == "relative_similarity" and signals.get("relative_similarity") is not None:
        return (
            f"the best match is weak for this corpus (relative_similarity "
            f"{float(signals['relative_similarity']):.2f} {condition.op} {condition.value:g})"
        )
    observed = signals.get(condition.signal)
    shown = f"{observed:.3f}" if isinstance(observed, float) else str(observed)
    return f"{condition.signal} = {shown} ({condition.describe()})"


def decide(
    conn: psycopg.Connection[Any],
    settings: Settings,
    query_text: str,
    hits: Sequence[Any],
    *,
    rule: AbstentionRule | None = None,
    embed: Embed | None = None,
) -> AbstentionDecision:
    """Should pgkb abstain on ``query_text``, given its retrieved ``hits`` (best first)?

    ``hits`` are search hits (``loader.search.SearchHit`` or mappings) with ``chunk_id``,
    ``score``, ``vector_similarity``, ``vector_rank`` and ``keyword_rank``; pass the hybrid
    hits the answer would be built from. No hits at all always abstains. ``embed`` (the
    embedding model's batch function) lets the gate measure ``focus_coverage``; it is called only
    when the rule in force has a clause on that signal (the default rule has none).
    """
    if not settings.abstention:
        return AbstentionDecision(False, "the abstention gate is off (abstention = false)", {})
    rule = rule or load_rule(conn, settings)
    # focus_coverage embeds words: only when the rule in force reads it
    needs_embed = any(c.signal == "focus_coverage" for clause in rule.clauses for c in clause)
    signals = compute_signals(conn, query_text, hits, embed=embed if needs_embed else None)
    if not hits:
        return AbstentionDecision(True, "retrieval found nothing", signals)
    return apply_rule(rule, signals)
