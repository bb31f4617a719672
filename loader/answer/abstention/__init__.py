"""The abstention gate: decide, from retrieval signals alone, that the corpus cannot answer.

pgkb says "I don't know" before calling any model when retrieval looks like it found nothing
that answers the question. The best cosine similarity alone cannot tell (questions the corpus
cannot answer share its vocabulary and score as high), so the gate looks at several signals of
one query. One job per module:

:mod:`.words`
    word heuristics, pure text: which words of a question look like names or identifiers,
    which are rare, which abbreviations the question defines itself.
:mod:`.signals`
    the database signals of one query and its hits (:func:`compute_signals`): unknown terms and
    names, IDF coverage, similarity, leg overlap, score gap.
:mod:`.focus`
    the question's focus (its rarest content words in general English) and how well the best
    passages cover it (``focus_coverage``: held lexically, else the nearest passage word by
    embedding).
:mod:`.profile`
    the corpus's own similarity scale, measured from random in-corpus pseudo-queries
    (``relative_similarity``).
:mod:`.rule`
    the rule (a disjunction of threshold clauses on the signals), its JSON form, and where it
    is stored (the ``abstention_rule`` setting, else ``kb.settings``, else the default).
:mod:`.decision`
    the verdict on one query (:func:`decide`, :func:`apply_rule`) and the reason shown.

``pgkb eval --calibrate`` derives the rule from the evaluation questions
(:mod:`loader.evaluation.calibrate`) and stores it; ``abstention = false`` turns the gate off.
"""

from __future__ import annotations

from loader.answer.abstention.decision import AbstentionDecision, apply_rule, decide
from loader.answer.abstention.rule import (
    DEFAULT_RULE,
    OPS,
    SETTINGS_KEY,
    SIGNALS,
    AbstentionRule,
    Condition,
    load_rule,
    save_rule,
)
from loader.answer.abstention.signals import compute_signals, unknown_names
from loader.answer.abstention.words import (
    common_words,
    defined_abbreviations,
    edit_distance,
    is_common,
    is_quantity,
    name_like_words,
    spelt_like_english,
)

__all__ = [
    "DEFAULT_RULE",
    "OPS",
    "SETTINGS_KEY",
    "SIGNALS",
    "AbstentionDecision",
    "AbstentionRule",
    "Condition",
    "apply_rule",
    "common_words",
    "compute_signals",
    "decide",
    "defined_abbreviations",
    "edit_distance",
    "is_common",
    "is_quantity",
    "load_rule",
    "name_like_words",
    "save_rule",
    "spelt_like_english",
    "unknown_names",
]
