"""The abstention gate on a tiny hand-made corpus in a real database (no model needed)."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from loader.answer.abstention import (
    DEFAULT_RULE,
    AbstentionRule,
    Condition,
    common_words,
    compute_signals,
    decide,
    defined_abbreviations,
    edit_distance,
    is_common,
    is_quantity,
    load_rule,
    name_like_words,
    save_rule,
    spelt_like_english,
)
from loader.errors import ConfigError
from loader.settings import Settings
from loader.similarity import (
    is_stale,
    load_profile,
    measure_profile,
    relative_similarity,
)
from tests.helpers import LONG_CHUNKS, MODEL, Doc, load_chunks, load_corpus

CHUNKS = [
    ("vacuum.html", "Routine Vacuuming", "VACUUM reclaims storage occupied by dead tuples."),
    ("vacuum.html", "Autovacuum", "The autovacuum daemon automates VACUUM and ANALYZE commands."),
    ("index.html", "CREATE INDEX", "CREATE INDEX constructs a B-tree index on a table column."),
    ("copy.html", "COPY", "COPY moves data between tables and files in text or CSV format."),
    (
        "errcodes.html",
        "Class 40",
        "Every SQLSTATE code is listed here.\n\n40P01 | deadlock_detected",
    ),
]


def _load(conn: psycopg.Connection[Any]) -> list[int]:
    return load_chunks(conn, CHUNKS)


def _hit(chunk_id: int, score: float, sim: float | None, vrank: int | None, krank: int | None):
    return {
        "chunk_id": chunk_id,
        "score": score,
        "vector_similarity": sim,
        "vector_rank": vrank,
        "keyword_rank": krank,
    }


def test_name_like_words() -> None:
    assert name_like_words("How do I set up MySQL replication with pg_cron?") == [
        "MySQL",
        "pg_cron",
    ]
    assert name_like_words("What does VACUUM FULL do? Does Oracle have it?") == [
        "VACUUM",
        "FULL",
        "Oracle",
    ]
    assert name_like_words("how big is a page") == []
    assert name_like_words("Is gzip level 9 slow in PostgreSQL 15.2?") == ["PostgreSQL"]


def test_numbers_times_dates_and_quantities_are_not_names() -> None:
    for word in ("2pm", "14:30", "3rd", "1990s", "64kB", "10GB", "5ms", "2024-05-01", "v15"):
        assert is_quantity(word), word
    for word in ("100MB/s", "40mg/day", "5mmol/L", "64-bit", "3-dimensional", "2-phase"):
        assert is_quantity(word), word
    for word in ("40P01", "pg_dump", "MySQL", "x86", "DENV-1", "scm3-139", "64-Bit", "5/8"):
        assert not is_quantity(word), word
    assert name_like_words("Can autovacuum run at 2pm on 2024-05-01 with 64MB?") == []


def test_inflections_and_compounds_of_common_words_are_common() -> None:
    vocabulary = common_words()
    if not vocabulary:
        pytest.skip("the local model's vocabulary is not installed")
    for word in ("gentlest", "quickest", "happier", "biggest", "leaderboard"):
        assert is_common(word, vocabulary), word
    for word in ("hstore", "unaccent", "patroni"):
        assert not is_common(word, vocabulary), word


def test_codes_inside_a_name_are_checked_alone(conn: psycopg.Connection[Any]) -> None:
    _load(conn)
    # the corpus lists 40P01 in a table, never right after the word SQLSTATE
    known = compute_signals(conn, "What does SQLSTATE 40P01 mean for COPY?", [])
    assert known["unknown_names"] == 0, known["unknown_name_list"]
    unknown = compute_signals(conn, "What does SQLSTATE 99Z99 mean for COPY?", [])
    assert unknown["unknown_name_list"] == ["99Z99"]
    assert compute_signals(conn, "Should COPY run at 2pm?", [])["unknown_names"] == 0


def test_a_misspelt_corpus_word_is_not_an_unknown_name(conn: psycopg.Connection[Any]) -> None:
    _load(conn)
    # the corpus says "autovacuum" and "reclaims": one letter missing, two letters swapped
    for question in ("What does the autovacum daemon do?", "Which storage does VACUUM recalim?"):
        signals = compute_signals(conn, question, [])
        assert signals["unknown_names"] == 0, (question, signals["unknown_name_list"])
    # a plural or possessive of a name the corpus has is that name
    assert compute_signals(conn, "How many SQLSTATEs are listed?", [])["unknown_names"] == 0
    assert compute_signals(conn, "Is COPY's CSV format strict?", [])["unknown_names"] == 0
    assert compute_signals(conn, "Do SQLTRACEs help?", [])["unknown_name_list"] == ["SQLTRACEs"]
    # two typos away, or a word the corpus never comes near, is still unknown
    assert compute_signals(conn, "What does the autovakum daemon do?", [])["unknown_names"] == 1
    assert compute_signals(conn, "Does hstore do that?", [])["unknown_name_list"] == ["hstore"]


def test_plain_words_spelt_like_english_are_not_names() -> None:
    if not common_words():
        pytest.skip("the local model's vocabulary is not installed")
    # words of some field that the vocabulary lacks: ordinary words, not names
    for word in ("adventitia", "hindrance", "unassociated", "perigenital", "stargazers"):
        assert spelt_like_english(word), word
    # coined names: a letter trigram no English word has
    for word in ("pgvector", "etcd", "hstore", "mongodb", "kafka", "pgbouncer"):
        assert not spelt_like_english(word), word


def test_abbreviations_the_question_defines() -> None:
    assert defined_abbreviations("Weighed food records (WFR) are cheap.") == {
        "WFR": "Weighed food records"
    }
    assert defined_abbreviations("Does dengue virus (DENV-1) spread?") == {"DENV-1": "dengue virus"}
    assert defined_abbreviations("Is vitamin B6 (VB6) enough?") == {"VB6": "vitamin B6"}
    assert defined_abbreviations("Is the Write-Ahead Log (WAL) safe?") == {"WAL": "Write-Ahead Log"}
    # letters the words before do not give, or no parentheses: not a definition
    assert defined_abbreviations("How do I use PostGIS (ST_DWithin)?") == {}
    assert defined_abbreviations("Forkhead 0 (fox0) factors") == {}
    assert defined_abbreviations("Does merge_action() exist?") == {}


def test_names_written_another_way_are_known(conn: psycopg.Connection[Any]) -> None:
    _load(conn)
    doc = conn.execute(
        "INSERT INTO kb.documents (source_uri, title, content_sha)"
        " VALUES ('cells.html', 'Cells', 'x') RETURNING id"
    ).fetchone()
    assert doc is not None
    conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha,"
        " token_count) VALUES (%s, 0, 'Cells', %s, 'x', 10)",
        (doc[0], "Later, iPSC-derived neurons and TRAP osteoclasts carry PPAR\u03b3 and RecQ."),
    )
    conn.commit()
    for question in (
        "Do iPSCderived neurons need VACUUM?",  # separators aside
        "Do TRAP+ osteoclasts regulate COPY?",  # a marker sign
        "Is RecQ-class helicase in COPY?",  # a hyphenated common word
        "Does PPAR\u03b3 bind?",  # a Greek letter inside the name
        "Do weighed food records (WFR) help?",  # defined by the question
        "Does the Comma Separated Values (CSV) file hold tuples?",  # the corpus says CSV
    ):
        signals = compute_signals(conn, question, [])
        assert signals["unknown_names"] == 0, (question, signals["unknown_name_list"])
    for question, name in (
        ("Is RecQ1-class helicase in COPY?", "RecQ1"),
        ("Does PPAR\u03b4 bind?", "PPAR\u03b4"),
        ("Do iPSCmade neurons need VACUUM?", "iPSCmade"),
        ("Can COPY read a LATERAL join?", "LATERAL"),  # not the stem of "later"
        ("Does the Tab Separated Values (TSV) file hold tuples?", "Tab Separated Values"),
    ):
        assert compute_signals(conn, question, [])["unknown_name_list"] == [name], question


def test_edit_distance_counts_one_swap_as_one_typo() -> None:
    assert edit_distance("vacum", "vacuum") == 1
    assert edit_distance("recalim", "reclaim") == 1
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("same", "same") == 0


def test_signals_see_unknown_names_and_coverage(conn: psycopg.Connection[Any]) -> None:
    ids = _load(conn)
    answerable = compute_signals(
        conn,
        "What does VACUUM reclaim from dead tuples?",
        [_hit(ids[0], 0.03, 0.7, 1, 1), _hit(ids[1], 0.02, 0.5, 2, None)],
    )
    assert answerable["unknown_terms"] == 0
    assert answerable["unknown_names"] == 0
    assert answerable["coverage"] == pytest.approx(1.0)
    assert answerable["top_similarity"] == pytest.approx(0.7)
    assert answerable["leg_overlap"] == 1
    assert answerable["keyword_hits"] == 1

    compound = compute_signals(conn, "Does the VACUUM-COPY pair reclaim tuples?", [])
    assert compound["unknown_names"] == 0  # both parts occur
    unknown = compute_signals(
        conn, "Does MongoDB vacuum dead tuples?", [_hit(ids[0], 0.03, 0.6, 1, None)]
    )
    assert unknown["unknown_name_list"] == ["MongoDB"]
    assert unknown["unknown_terms"] == 1
    assert 0 < unknown["coverage"] < 1


def test_decide_applies_rule_and_explains(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    ids = _load(conn)
    hits = [_hit(ids[2], 0.03, 0.6, 1, 1)]
    rule = AbstentionRule(((Condition("unknown_names", ">=", 1),),))
    yes = decide(
        conn, settings, "Can CREATE INDEX build a Bloom filter in Cassandra?", hits, rule=rule
    )
    assert yes.abstain
    assert "Cassandra" in yes.reason
    no = decide(conn, settings, "How does CREATE INDEX build a B-tree?", hits, rule=rule)
    assert not no.abstain
    assert decide(conn, settings, "anything", [], rule=rule).abstain
    off = decide(conn, settings.replace(abstention=False), "Cassandra?", hits, rule=rule)
    assert not off.abstain


def test_rule_round_trips_through_kb_settings(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    assert load_rule(conn, settings) == DEFAULT_RULE
    rule = AbstentionRule(
        ((Condition("coverage", "<", 0.4), Condition("top_similarity", "<", 0.5)),),
        calibration={"questions": 3},
    )
    save_rule(conn, rule)
    conn.commit()
    stored = load_rule(conn, settings)
    assert stored.clauses == rule.clauses
    assert stored.source == "calibrated"
    assert stored.calibration == {"questions": 3}
    override = json.dumps([[{"signal": "keyword_hits", "op": "<", "value": 1}]])
    from_setting = load_rule(conn, settings.replace(abstention_rule=override))
    assert from_setting.describe() == "(keyword_hits < 1)"


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"clauses": "x"}',
        '[[{"signal": "nope", "op": "<", "value": 1}]]',
        '[[{"signal": "coverage", "op": "!=", "value": 1}]]',
        '[[{"signal": "coverage", "op": "<", "value": "high"}]]',
    ],
)
def test_bad_rule_is_a_clear_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="abstention rule"):
        AbstentionRule.from_json(bad, source="test")


# --- signals for plain-word questions ---------------------------------------------------------


def _idf(conn: psycopg.Connection[Any], lexeme: str) -> float:
    """BM25's IDF of ``lexeme`` recomputed from the chunks' tsvectors (independently)."""
    vectors = [r[0] for r in conn.execute("SELECT tsvector_to_array(tsv) FROM kb.chunks")]
    df = sum(1 for v in vectors if lexeme in v)
    n = len(vectors)
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def test_plain_word_signals(conn: psycopg.Connection[Any]) -> None:
    ids = _load(conn)
    # "xylophon" occurs nowhere; "reclaim" and "tupl" only in chunk 0, "daemon" only in chunk 1
    question = "Does the daemon reclaim tuples with a xylophone?"
    hits = [_hit(ids[1], 0.03, 0.62, 2, 1), _hit(ids[0], 0.02, 0.7, 1, None)]
    signals = compute_signals(conn, question, hits)
    idf = {lex: _idf(conn, lex) for lex in ("daemon", "reclaim", "tupl", "xylophon")}
    total = sum(idf.values())
    assert signals["unknown_share"] == pytest.approx(idf["xylophon"] / total, abs=1e-6)
    # the two hits together hold every known word; the best single one only part of them
    assert signals["passage_coverage"] == pytest.approx(1 - idf["xylophon"] / total, abs=1e-6)
    assert signals["coverage"] < signals["passage_coverage"]
    # the hit nearest in meaning (vector rank 1) was not found by the keyword leg
    assert signals["leg_agreement"] == 0.0
    assert signals["relative_similarity"] is None  # no profile measured for this corpus
    agreeing = compute_signals(conn, question, [_hit(ids[0], 0.03, 0.7, 1, 1)])
    assert agreeing["leg_agreement"] == 1.0
    assert (
        compute_signals(conn, question, [_hit(ids[0], 0.01, None, None, 1)])["leg_agreement"]
        is None
    )


def test_relative_similarity_reads_the_active_models_profile(conn: psycopg.Connection[Any]) -> None:
    ids = _load(conn)
    conn.execute("SELECT kb.register_model('tiny', 3, 'test')")
    profile = {"model": "tiny", "chunks": 5, "sample": 40, "q10": 0.3, "q25": 0.4, "q50": 0.5}
    conn.execute(
        "INSERT INTO kb.settings (key, value) VALUES ('similarity_profile', %s::jsonb)",
        (json.dumps(profile),),
    )
    signals = compute_signals(conn, "VACUUM", [_hit(ids[0], 0.03, 0.7, 1, 1)])
    assert signals["relative_similarity"] == pytest.approx((0.7 - 0.5) / (0.5 - 0.3))
    # a profile measured with another model says nothing about this one's similarities
    conn.execute(
        "UPDATE kb.settings SET value = jsonb_set(value, '{model}', '\"other\"') "
        "WHERE key = 'similarity_profile'"
    )
    assert (
        compute_signals(conn, "VACUUM", [_hit(ids[0], 0.03, 0.7, 1, 1)])["relative_similarity"]
        is None
    )
    assert relative_similarity(0.6, {"q10": 0.5, "q50": 0.5}) is None  # no spread, no scale


def test_profile_is_measured_from_pseudo_queries(conn: psycopg.Connection[Any]) -> None:
    load_corpus(conn, [Doc("Checkpoint Tuning", "/kb/checkpoint.md", "guide", LONG_CHUNKS)])
    stored = {r[0]: r[1] for r in conn.execute("SELECT id, content FROM kb.chunks")}
    pseudo = conn.execute("SELECT chunk_id, query FROM kb.pseudo_queries(1000)").fetchall()
    assert len(pseudo) == len(LONG_CHUNKS)
    assert all(len(q.split()) == 10 and q in " ".join(stored[c].split()) for c, q in pseudo)
    assert conn.execute("SELECT count(*) FROM kb.pseudo_queries(5)").fetchone() == (5,)
    assert pseudo == conn.execute("SELECT chunk_id, query FROM kb.pseudo_queries(1000)").fetchall()

    def embed(texts: Any) -> list[list[float]]:  # a direction of its own per pseudo-query
        return [[0.1 * (len(t) % 7), 0.0, 1.0, 0.0] for t in texts]

    vectors = [v for _h, _c, v in LONG_CHUNKS]

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True)) / (
            math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        )

    best = [max(cos(q, v) for v in vectors) for q in embed([q for _c, q in pseudo])]
    assert is_stale(conn, load_profile(conn))
    profile = measure_profile(conn, embed)
    assert profile is not None and load_profile(conn) == profile
    assert (profile["model"], profile["chunks"], profile["sample"]) == (MODEL, 30, 30)
    assert profile["q50"] == pytest.approx(statistics.median(best), abs=1e-5)
    assert profile["q10"] <= profile["q25"] <= profile["q50"] <= profile["q90"]
    assert not is_stale(conn, profile)
    assert is_stale(conn, {**profile, "chunks": 10})  # the corpus has tripled since
    assert is_stale(conn, {**profile, "model": "another"})
    # a corpus too small to sample gives no profile, and stores none
    conn.execute("DELETE FROM kb.chunks WHERE chunk_index >= 10")
    conn.execute("DELETE FROM kb.settings WHERE key = 'similarity_profile'")
    assert measure_profile(conn, embed) is None and load_profile(conn) is None


def test_default_rule_says_i_dont_know_to_a_plain_word_question(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    # a tiny corpus (30 chunks on checkpoints, hand-made vectors) with its similarity profile
    load_corpus(conn, [Doc("Checkpoint Tuning", "/kb/checkpoint.md", "guide", LONG_CHUNKS)])
    profile = measure_profile(conn, lambda texts: [[0.1 * (len(t) % 7), 0, 1, 0] for t in texts])
    assert profile is not None
    conn.commit()

    def hits(question: str, vector: list[float]) -> list[dict[str, Any]]:
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(
                "SELECT chunk_id, score, vector_similarity, vector_rank, keyword_rank "
                "FROM kb.hybrid_search(%s, %s::vector)",
                (question, str(vector)),
            ).fetchall()

    # plain words, no name: the corpus has no word for choir or rehearsal, and nothing near it
    question = "Is there a staff choir that rehearses after work?"
    unanswerable = decide(conn, settings, question, hits(question, [1, 0, 0.2, 0]))
    assert unanswerable.abstain, unanswerable.signals
    assert unanswerable.signals["unknown_names"] == 0
    assert "unknown_share" in unanswerable.reason
    question = "How does the checkpointer spread its writes to avoid spikes?"
    answerable = decide(conn, settings, question, hits(question, [0, 0, 1, 0.1]))
    assert not answerable.abstain, answerable.signals
