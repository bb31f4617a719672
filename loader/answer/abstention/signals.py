"""Database signals of the abstention gate: what the corpus says about one query and its hits.

:func:`compute_signals` returns, for one query and its retrieved hits (best first):

``unknown_terms``
    query words (lexemes of ``to_tsvector('english', query)``) that occur in no chunk of the
    corpus (``kb.term_stats``).
``unknown_names``
    names in the question that occur nowhere in the corpus (:func:`unknown_names`): runs of
    words that look like names or identifiers ("MySQL", "pg_cron", "ALTER SYSTEM", "Data
    Guard"), checked as exact whole words (so "LATERAL" is not found in "later"), and plain
    words that are neither common English (the local model's WordPiece vocabulary) nor any
    corpus lexeme ("crosstab", "hstore"). A product or feature the corpus never mentions is the
    strongest sign. Which words look like names is :mod:`.words`' job.
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

Signals that exist for plain-word questions too (no name needed):

``unknown_share``
    the share of the query's IDF mass in words the corpus never uses ("Is there a cycle to work
    scheme?" over a handbook that never says cycle). Names and typos aside, a question whose
    rarest words are all unknown asks about something the corpus does not hold.
``passage_coverage``
    the share of the query's IDF mass that the retrieved chunks hold together (``coverage`` is
    the best single chunk's share).
``relative_similarity``
    the best cosine similarity against this corpus's own scale, measured for the active model
    from random in-corpus pseudo-queries (:mod:`.profile`): 0 at their median, -1 at their 10th
    percentile. Thresholds on it travel between corpora and models; None without a profile.
``leg_agreement``
    1.0 when the hit nearest to the question in meaning (best vector rank) was found by the
    keyword leg too, else 0.0: both legs point at the same passage.
``focus_coverage``
    how well the best three passages cover the question's focus, its three rarest content words
    in general English (:mod:`.focus`): a word counts 1 when a passage holds it, else its best
    cosine similarity to a word of the passages (synonyms: "bike" and "cycle"). Near 1 when the
    passages speak of the question's subject; low for "Do we have a company choir?" over a
    handbook whose closest passages are about clubs and teams. Needs the embedding model
    (``embed``); None without it, or when the embedding fails.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.answer.abstention.focus import (
    TOP_PASSAGES,
    Embed,
    focus_coverage,
    focus_words,
    question_words,
)
from loader.answer.abstention.words import (
    defined_abbreviations,
    edit_distance,
    is_identifier,
    name_runs,
    rare_words,
)
from loader.db import queries
from loader.errors import PgkbError
from loader.search import hit_value
from loader.similarity import load_profile, relative_similarity

log = logging.getLogger(__name__)


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
    row = conn.execute(queries.SQUASHED_LEXEME_FOUND, {"squashed": squashed}).fetchone()
    return bool(row is not None and row[0])


def unknown_names(conn: psycopg.Connection[Any], query_text: str) -> list[str]:
    """Names and rare words of the question that occur nowhere in the corpus."""
    missing: list[str] = []
    phrases: list[str] = []
    for run in name_runs(query_text):
        if " " in run and any(is_identifier(w) for w in run.split()) and not _name_found(conn, run):
            # "SQLSTATE 40P01": a code or identifier is checked alone, the way the keyword leg
            # matches it, and the words around it as the names they are
            rest: list[str] = []
            for word in run.split():
                if is_identifier(word):
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
    rare = list(dict.fromkeys(rare_words(query_text)))
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
    near = conn.execute(queries.NEAR_LEXEMES, {"lexeme": lexeme}).fetchall()
    return any(edit_distance(lexeme, str(row[0])) <= 1 for row in near)


def focus_signal(
    conn: psycopg.Connection[Any], query_text: str, hits: Sequence[Any], embed: Embed | None
) -> tuple[float | None, dict[str, bool]]:
    """``focus_coverage`` of one query and its hits (best first), with each focus word and
    whether a top passage holds it. None when there is no focus word, or a focus word the
    passages lack and no way to embed (``embed`` None or failing)."""
    words = question_words(query_text)[:200]
    if not words:
        return None, {}
    lexemes = {
        str(word): list(found or ())
        for word, _absent, found in conn.execute(queries.WORD_LEXEMES, {"words": words})
    }
    focus = focus_words(words, lexemes)
    if not focus:
        return None, {}
    top = [h for h in hits if hit_value(h, "chunk_id") is not None][:TOP_PASSAGES]
    by_word = {w.lower(): lexemes.get(w, []) for w in words}
    wanted = sorted({lex for w in focus for lex in by_word.get(w, [])})
    holds: set[str] = set()
    if top and wanted:
        ids = [int(hit_value(h, "chunk_id")) for h in top]
        for _chunk_id, present in conn.execute(
            queries.CHUNK_LEXEMES, {"ids": ids, "lexemes": wanted}
        ):
            holds.update(present or ())
    held = {w: bool(set(by_word.get(w, [])) & holds) for w in focus}
    texts = [f"{hit_value(h, 'heading_path') or ''}\n{hit_value(h, 'content') or ''}" for h in top]
    try:
        return focus_coverage(focus, held, texts, embed), held
    except PgkbError as exc:
        log.warning("focus_coverage not measured: the embedding model failed (%s)", exc.message)
        return None, held


def compute_signals(
    conn: psycopg.Connection[Any],
    query_text: str,
    hits: Sequence[Any],
    *,
    embed: Embed | None = None,
) -> dict[str, Any]:
    """The retrieval signals of one query and its hits (best first), as plain numbers.

    ``embed`` (the embedding model's batch function) is needed for ``focus_coverage`` only."""
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
    held: set[str] = set()
    if chunk_ids and total > 0:
        rows = conn.execute(
            queries.CHUNK_LEXEMES, {"ids": chunk_ids, "lexemes": sorted(idf)}
        ).fetchall()
        for _chunk_id, present in rows:
            coverage = max(coverage, sum(idf[lex] for lex in present or ()) / total)
            held.update(present or ())

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
    ranked = [h for h in hits if hit_value(h, "vector_rank") is not None]
    nearest = min(ranked, key=lambda h: int(hit_value(h, "vector_rank")), default=None)
    top = max(similarities) if similarities else None
    focus, focus_held = focus_signal(conn, query_text, hits, embed)
    signals: dict[str, Any] = {
        "hits": float(len(hits)),
        "unknown_terms": float(len(unknown)),
        "unknown_names": float(len(names_missing)),
        "coverage": round(coverage, 6) if total > 0 else None,
        "top_similarity": top,
        "leg_overlap": float(both),
        "keyword_hits": float(keyword_hits),
        "score_gap": gap,
        "unknown_share": (
            round(sum(idf[lex] for lex in unknown) / total, 6) if total > 0 else None
        ),
        "passage_coverage": round(sum(idf[lex] for lex in held) / total, 6) if total > 0 else None,
        "relative_similarity": relative_similarity(top, load_profile(conn)),
        "leg_agreement": (
            None if nearest is None else float(hit_value(nearest, "keyword_rank") is not None)
        ),
        "focus_coverage": None if focus is None else round(focus, 6),
        "unknown_term_list": unknown,
        "unknown_name_list": names_missing,
        "focus_words": focus_held,
    }
    for key, value in signals.items():
        if isinstance(value, float) and not math.isfinite(value):
            signals[key] = None
    return signals
