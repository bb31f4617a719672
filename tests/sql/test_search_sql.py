"""The retrieval functions in SQL, on a hand-made corpus with 3-dimensional vectors.

Golden rankings: every expected id and score below is derived by hand (vectors) or recomputed
here independently from the raw tsvectors (BM25), never read back from the function under test.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import psycopg
import pytest
from pgvector import Vector

from loader.errors import SqlState
from tests.helpers import (
    CHUNKS,
    D1,
    D2,
    D3,
    Corpus,
    load_golden,
    raises_code,
    rows,
    skip_without_pg_textsearch,
    use_pg_textsearch,
)


@pytest.fixture
def golden(conn: psycopg.Connection[Any]) -> Corpus:
    return load_golden(conn)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def python_bm25(
    conn: psycopg.Connection[Any],
    query: str,
    k1: float = 0.9,
    b: float = 0.75,
    heading_weight: float = 1.0,
) -> dict[int, float]:
    """BM25 recomputed in Python from the raw tsvectors (an independent implementation)."""
    lexemes = [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', %s)))", (query,)
        )
    ]
    chunks: dict[int, dict[str, tuple[int, int]]] = {}
    for chunk_id, lexeme, weights in conn.execute(
        "SELECT c.id, u.lexeme, u.weights FROM kb.chunks c, unnest(c.tsv) u"
    ):
        chunks.setdefault(chunk_id, {})[lexeme] = (
            sum(1 for w in weights if w == "A"),
            sum(1 for w in weights if w != "A"),
        )
    n = len(chunks)
    avgdl = sum(len(v) for v in chunks.values()) / n
    scores = {}
    for chunk_id, terms in chunks.items():
        score = 0.0
        for lexeme in lexemes:
            if lexeme not in terms:
                continue
            df = sum(1 for t in chunks.values() if lexeme in t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            heading, body = terms[lexeme]
            tf = body + heading_weight * heading
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(terms) / avgdl))
        if score:
            scores[chunk_id] = score
    return scores


# --- keyword leg ------------------------------------------------------------------------------


def test_bm25_scores_and_ranks_are_okapi_bm25(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    query = "memory used by sort operations"
    got = rows(
        conn, "SELECT chunk_id, rank, score, strict_match FROM kb.keyword_search(%s)", (query,)
    )
    expected = python_bm25(conn, query)
    assert {r["chunk_id"] for r in got} == set(expected)
    # work_mem's chunk has all the words (strict match first), then by BM25
    c = golden.ids
    assert [r["chunk_id"] for r in got] == [c[3], c[2]]
    assert [r["rank"] for r in got] == [1, 2]
    assert [r["strict_match"] for r in got] == [True, False]
    for r in got:
        assert r["score"] == pytest.approx(expected[r["chunk_id"]], rel=1e-9)


def test_bm25_parameters_and_heading_weight(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    query = "memory vacuum"  # 'memory' is in D2's headings, 'vacuum' in D3's
    for k1, b, hw in [(1.2, 0.75, 1.0), (0.9, 0.4, 1.0), (1.5, 1.0, 3.0), (2.0, 0.0, 0.5)]:
        got = rows(
            conn,
            "SELECT chunk_id, score FROM kb.keyword_search(%s, bm25_k1 => %s, "
            "bm25_b => %s, heading_weight => %s)",
            (query, k1, b, hw),
        )
        expected = python_bm25(conn, query, k1, b, hw)
        assert {r["chunk_id"]: pytest.approx(expected[r["chunk_id"]], rel=1e-9) for r in got} == {
            k: v for k, v in expected.items()
        }
        assert [r["score"] for r in got] == sorted((r["score"] for r in got), reverse=True)


@pytest.mark.usefixtures("keyword_backend")
def test_or_semantics_for_questions(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    # no chunk holds all these words; OR semantics still finds the ones holding some
    got = rows(
        conn,
        "SELECT chunk_id, strict_match FROM kb.keyword_search("
        "'how do I stop a deadlock between two transactions in production')",
    )
    assert got[0]["chunk_id"] == golden.ids[0]
    assert not any(r["strict_match"] for r in got)


@pytest.mark.usefixtures("keyword_backend")
@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("40P01", 0),
        ('"40P01"', 0),
        ("maintenance_work_mem", 2),
        ("work_mem", 3),
        ('"dead tuples"', 4),
        ("serialization_failure", 1),
    ],
)
def test_exact_identifiers_find_their_chunk_first(
    conn: psycopg.Connection[Any], golden: Corpus, query: str, first: int
) -> None:
    got = rows(conn, "SELECT chunk_id, strict_match FROM kb.keyword_search(%s)", (query,))
    assert got[0]["chunk_id"] == golden.ids[first]
    assert got[0]["strict_match"]


@pytest.mark.usefixtures("keyword_backend")
def test_phrase_beats_scattered_words(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    # "sort operations" as a phrase is in chunk 3 only; chunk 2 has 'operations' alone. Quoted
    # text is now a requirement (it was ranked first, with chunk 2 after it): chunk 2 is gone
    got = rows(conn, "SELECT chunk_id, strict_match FROM kb.keyword_search('\"sort operations\"')")
    assert [(r["chunk_id"], r["strict_match"]) for r in got] == [(golden.ids[3], True)]
    # unquoted, both words rank, the chunk holding them as a phrase first
    got = rows(conn, "SELECT chunk_id, strict_match FROM kb.keyword_search('sort operations')")
    assert [(r["chunk_id"], r["strict_match"]) for r in got][:2] == [
        (golden.ids[3], True),
        (golden.ids[2], False),
    ]


@pytest.mark.usefixtures("keyword_backend")
def test_negated_words_exclude_chunks(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    got = rows(conn, "SELECT chunk_id FROM kb.keyword_search('memory -maintenance')")
    assert [r["chunk_id"] for r in got] == [golden.ids[3]]


@pytest.mark.usefixtures("keyword_backend")
def test_a_repeated_query_word_counts_once(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    # BM25 sums over the query's distinct lexemes on both backends (pg_textsearch would
    # multiply a word's score by its count in the query): repeating a word, or writing it
    # inflected again, changes nothing
    query = "SELECT chunk_id, score FROM kb.keyword_search(%s)"
    once = rows(conn, query, ("vacuum dead tuples",))
    assert len(once) >= 2
    for repeated in ("vacuum vacuum dead tuples", "vacuum dead tuples, vacuuming vacuums"):
        got = rows(conn, query, (repeated,))
        assert [r["chunk_id"] for r in got] == [r["chunk_id"] for r in once]
        assert [r["score"] for r in got] == pytest.approx([r["score"] for r in once], rel=1e-6)


@pytest.mark.usefixtures("keyword_backend")
def test_an_identifier_s_chunk_comes_first_however_low_its_score(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    # no chunk holds every word (no strict match); chunk 0 holds four of them and scores
    # highest, chunk 3 holds work_mem as a word (chunk 2 only inside maintenance_work_mem):
    # the identifier rule ranks chunk 3 first even when one row is asked for, so it is a
    # candidate whatever its score
    text = "work_mem deadlock detected transactions wait"
    got = rows(conn, "SELECT chunk_id, strict_match FROM kb.keyword_search(%s, 1)", (text,))
    assert got == [{"chunk_id": golden.ids[3], "strict_match": False}]
    ranked = rows(conn, "SELECT chunk_id FROM kb.keyword_search(%s, 10)", (text,))
    assert [r["chunk_id"] for r in ranked][:2] == [golden.ids[3], golden.ids[0]]
    # the parser reads pg_hba.conf as one file token, not as pg_hba's words: the chunk holding
    # it is still a candidate of the identifier rule
    conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
        "token_count) SELECT document_id, 9, 'Client authentication', "
        "'Edit pg_hba.conf to let the host connect.', 'sha', 9 FROM kb.chunks WHERE id = %s",
        (golden.ids[0],),
    )
    conn.commit()
    text = "pg_hba.conf deadlock detected transactions wait"
    got = rows(conn, "SELECT content FROM kb.keyword_search(%s, 1)", (text,))
    assert got == [{"content": "Edit pg_hba.conf to let the host connect."}]


@pytest.mark.usefixtures("keyword_backend")
def test_the_identifier_rule_ranks_its_best_scored_chunks_among_more_than_a_thousand(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    # 1,100 long chunks hold foo_widget (stored first), 20 short ones hold it with gizmo (stored
    # after), 30 chunks without it score higher (gizmo flux): the identifier rule ranks the
    # chunks holding foo_widget first, the 20 short ones (the best scored of them) before the
    # long ones, however many hold it and wherever they are stored
    filler = " ".join(f"filler{i}" for i in range(60))
    texts = [f"foo_widget {filler}"] * 1100
    texts += [f"foo_widget gizmo note {i}" for i in range(20)]
    texts += [f"gizmo flux remark {i}" for i in range(30)]
    conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
        "token_count) SELECT %s, 100 + n, '', t, 'sha', 9 FROM unnest(%s::text[]) "
        "WITH ORDINALITY AS u(t, n)",
        (D1, texts),
    )
    conn.commit()
    got = rows(conn, "SELECT content FROM kb.keyword_search('foo_widget gizmo flux', 20)")
    assert sorted(r["content"] for r in got) == sorted(texts[1100:1120])


def test_pg_textsearch_scores_are_the_index_s_own_whatever_the_search_path(
    conn: psycopg.Connection[Any], golden: Corpus, pg_url: str
) -> None:
    # each top-k candidate's score is the one its index scan computed (not its text scored
    # again): the same as scoring the chunk alone against its collection's index; and the call
    # works in a session whose search_path lacks the extension's schema (pg_textsearch's planner
    # hook looks its score accessor up by name)
    skip_without_pg_textsearch(pg_url)
    use_pg_textsearch(conn)
    conn.execute("SET pgkb.keyword_backend = 'pg_textsearch'")
    conn.execute("SET search_path = pg_catalog")
    query = "vacuum dead tuples memory"
    got = rows(conn, "SELECT chunk_id, score FROM kb.keyword_search(%s, 10)", (query,))
    assert len(got) >= 3
    conn.execute("SET search_path = public, pg_catalog")
    index = "kb." + conn.execute("SELECT kb.keyword_index_name('default')").fetchone()[0]
    alone = dict(
        conn.execute(
            "SELECT id, -((heading_path || ' ' || content) <@> to_bm25query(%s, %s))"
            " FROM kb.chunks WHERE id = ANY(%s)",
            (query, index, [r["chunk_id"] for r in got]),
        ).fetchall()
    )
    assert {r["chunk_id"]: pytest.approx(r["score"], rel=1e-5) for r in got} == alone
    assert [r["score"] for r in got] == sorted((r["score"] for r in got), reverse=True)


def test_max_postings_bounds_which_words_find_candidates(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    # df: 'deadlock' 1 chunk (0), 'memori' 2 chunks (2, 3)
    c = golden.ids
    query = "deadlock memory"
    unbounded = rows(
        conn, "SELECT chunk_id, score FROM kb.keyword_search(%s, max_postings => NULL)", (query,)
    )
    assert sorted(r["chunk_id"] for r in unbounded) == [c[0], c[2], c[3]]
    # 'deadlock' fits the bound; 'memori' (1 + 2 postings) fits four times the bound, so its
    # chunks weigh in for the room left (match_count) and are scored: the exact ranking
    bounded = rows(
        conn, "SELECT chunk_id, score FROM kb.keyword_search(%s, max_postings => 1)", (query,)
    )
    assert bounded == unbounded
    # with no room at all only the rarest word finds candidates, scored exactly
    rarest = rows(
        conn, "SELECT chunk_id, score FROM kb.keyword_search(%s, max_postings => 0)", (query,)
    )
    assert [r["chunk_id"] for r in rarest] == [c[0]]
    assert rarest[0]["score"] == pytest.approx(
        next(r["score"] for r in unbounded if r["chunk_id"] == c[0])
    )
    # the rarest word always finds candidates, even over the bound
    assert [
        r["chunk_id"]
        for r in rows(conn, "SELECT chunk_id FROM kb.keyword_search('memory', max_postings => 1)")
    ] == [c[2], c[3]]


def test_ts_rank_is_selectable(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    got = rows(
        conn,
        "SELECT chunk_id, score FROM kb.keyword_search('vacuum storage', "
        "keyword_ranking => 'ts_rank')",
    )
    expected = dict(
        conn.execute(
            "SELECT id, ts_rank(tsv, to_tsquery('english', 'vacuum | storage'))::float8 "
            "FROM kb.chunks "
            "WHERE tsv @@ to_tsquery('english', 'vacuum | storage')"
        ).fetchall()
    )
    assert {r["chunk_id"]: r["score"] for r in got} == pytest.approx(expected)
    with raises_code(SqlState.INVALID_ARGUMENT, match="bm25, ts_rank"):
        conn.execute("SELECT * FROM kb.keyword_search('vacuum', keyword_ranking => 'tfidf')")


# --- vector leg -------------------------------------------------------------------------------


def test_vector_golden_ranking(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    q = [0.6, 0.8, 0.0]
    got = rows(conn, "SELECT chunk_id, rank, similarity FROM kb.vector_search(%s, 5)", (Vector(q),))
    expected = sorted(
        ((cosine(q, c[5]), golden.ids[i]) for i, c in enumerate(CHUNKS)),
        key=lambda t: (-t[0], t[1]),
    )
    assert [r["chunk_id"] for r in got] == [cid for _, cid in expected]
    # [0.6,0.8,0] vs chunk 1 [0.8,0.6,0] = 0.96; chunk 2 [0,1,0] = 0.8; chunk 0 = 0.6
    assert [r["chunk_id"] for r in got[:3]] == [golden.ids[1], golden.ids[2], golden.ids[0]]
    assert [r["similarity"] for r in got[:3]] == pytest.approx([0.96, 0.8, 0.6], abs=1e-6)
    assert [r["rank"] for r in got] == [1, 2, 3, 4, 5]


def test_vector_ties_are_broken_by_chunk_id(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    got = rows(conn, "SELECT chunk_id, similarity FROM kb.vector_search('[1,0,0]', 5)")
    # chunks 2, 3, 4 are all orthogonal to [1,0,0]: similarity 0, ordered by id
    assert [r["chunk_id"] for r in got] == golden.ids[:2] + sorted(golden.ids[2:])
    assert [r["similarity"] for r in got][2:] == pytest.approx([0, 0, 0], abs=1e-6)


def test_min_similarity_drops_weak_hits(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    got = rows(
        conn, "SELECT chunk_id, rank FROM kb.vector_search('[0.6,0.8,0]', 5, min_similarity => 0.7)"
    )
    assert [(r["chunk_id"], r["rank"]) for r in got] == [(golden.ids[1], 1), (golden.ids[2], 2)]


def test_wrong_dimension_names_both(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    with raises_code(SqlState.DIMENSION_MISMATCH) as err:
        conn.execute("SELECT * FROM kb.vector_search('[1,0]')")
    message = str(err.value)
    assert "2 dimensions" in message and "golden" in message and "has 3" in message
    conn.rollback()
    with raises_code(SqlState.DIMENSION_MISMATCH, match=r"2 dimensions.*golden"):
        conn.execute("SELECT * FROM kb.hybrid_search('vacuum', '[1,0]')")


def test_unknown_model_names_the_registered_ones(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    with raises_code(SqlState.MODEL_NOT_REGISTERED) as err:
        conn.execute("SELECT * FROM kb.vector_search('[1,0,0]', model => 'text-embedding-3-small')")
    assert "text-embedding-3-small" in str(err.value) and "golden (3 dims, active)" in str(
        err.value
    )


def test_other_models_vectors_are_never_compared(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    other = conn.execute("SELECT kb.register_model('other', 3, 'test')").fetchone()[0]
    conn.execute(
        "INSERT INTO kb.embeddings SELECT chunk_id, %s, '[-1,0,0]' FROM kb.embeddings "
        "WHERE model_id = %s",
        (other, golden.model_id),
    )
    by_golden = rows(conn, "SELECT chunk_id FROM kb.vector_search('[1,0,0]', 1)")
    by_other = rows(
        conn, "SELECT chunk_id, similarity FROM kb.vector_search('[1,0,0]', 5, model => 'other')"
    )
    assert by_golden[0]["chunk_id"] == golden.ids[0]
    assert [r["similarity"] for r in by_other] == pytest.approx([-1.0] * 5)


def test_vector_query_uses_the_models_hnsw_index(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = notice")
    conn.execute("SET enable_seqscan = off")  # 5 rows: make the planner pick an index at all
    conn.execute("SELECT * FROM kb.vector_search('[1,0,0]', 3)").fetchall()
    plans = "\n".join(notices)
    assert f"Index Scan using embeddings_hnsw_model_{golden.model_id}" in plans


# --- fusion -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("keyword_backend")
def test_rrf_fusion_golden(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    q = [0.0, 0.6, 0.8]  # nearest: chunk 3 (1.0), chunk 4 (0.8), chunk 2 (0.6), ...
    text = "vacuum"  # keyword: chunks 4 and 2 (chunk 4 has 'vacuum' twice + heading)
    vec = rows(conn, "SELECT chunk_id, rank FROM kb.vector_search(%s, 3)", (Vector(q),))
    kw = rows(conn, "SELECT chunk_id, rank FROM kb.keyword_search(%s, 3)", (text,))
    c = golden.ids
    assert [r["chunk_id"] for r in vec] == [c[3], c[4], c[2]]
    assert [r["chunk_id"] for r in kw] == [c[4], c[2]]
    got = rows(
        conn,
        "SELECT * FROM kb.hybrid_search(%s, %s, match_count => 10, "
        "vector_candidates => 3, keyword_candidates => 3, rrf_k => 10, "
        "vector_weight => 2.0, keyword_weight => 0.5)",
        (text, Vector(q)),
    )
    expected = {
        c[4]: 2.0 / (10 + 2) + 0.5 / (10 + 1),
        c[3]: 2.0 / (10 + 1),
        c[2]: 2.0 / (10 + 3) + 0.5 / (10 + 2),
    }
    assert [r["chunk_id"] for r in got] == sorted(expected, key=lambda k: -expected[k])
    for r in got:
        assert r["score"] == pytest.approx(expected[r["chunk_id"]], rel=1e-12)
    by_id = {r["chunk_id"]: r for r in got}
    assert (by_id[c[3]]["vector_rank"], by_id[c[3]]["keyword_rank"]) == (1, None)
    assert by_id[c[3]]["keyword_score"] is None
    assert by_id[c[4]]["vector_similarity"] == pytest.approx(0.8)
    assert by_id[c[4]]["title"] == "Routine Vacuuming"
    assert by_id[c[4]]["source_uri"] == "routine-vacuuming.html"
    assert by_id[c[4]]["category"] == "maintenance" and by_id[c[4]]["token_count"] == 15


def test_rrf_ties_are_deterministic(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    # vector list: chunk 0 (rank 1), chunk 1 (rank 2); keyword list: chunk 1 (rank 1) only ...
    # with equal weights and k = 0 a chunk first in one list and absent from the other scores 1.0
    c = golden.ids
    got = rows(
        conn,
        "SELECT chunk_id, score, vector_rank, keyword_rank FROM kb.hybrid_search("
        "'serialization_failure', '[1,0,0]', match_count => 2, vector_candidates => 1, "
        "keyword_candidates => 1, rrf_k => 0, vector_weight => 1.0, exact_keyword_weight => 1.0)",
    )
    assert [(r["chunk_id"], r["score"]) for r in got] == [(c[0], 1.0), (c[1], 1.0)]
    # same score, same best rank (1): the smaller chunk id first, on every call
    again = rows(
        conn,
        "SELECT chunk_id FROM kb.hybrid_search('serialization_failure', '[1,0,0]', "
        "match_count => 2, vector_candidates => 1, keyword_candidates => 1, rrf_k => 0, "
        "vector_weight => 1.0, exact_keyword_weight => 1.0)",
    )
    assert [r["chunk_id"] for r in again] == [c[0], c[1]]


def test_exact_queries_weigh_the_keyword_leg_by_exact_keyword_weight(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    # the same two one-item lists as above (vector: chunk 0; keyword: chunk 1), rrf_k 0
    c = golden.ids
    sql = (
        "SELECT chunk_id, score FROM kb.hybrid_search(%s, '[1,0,0]', match_count => 2, "
        "vector_candidates => 1, keyword_candidates => 1, rrf_k => 0, vector_weight => 2.0, "
        "keyword_weight => 1.0, exact_keyword_weight => 3.0)"
    )
    # an identifier asks for exact matching: the keyword leg weighs 3 and leads
    exact = rows(conn, sql, ("serialization_failure",))
    assert [(r["chunk_id"], r["score"]) for r in exact] == [(c[1], 3.0), (c[0], 2.0)]
    # the same words as a plain question: keyword_weight (1) applies and the vector leg leads
    plain = rows(conn, sql, ("serialization failure",))
    assert plain[0]["chunk_id"] == c[0] and plain[0]["score"] == 2.0
    assert [r["score"] for r in plain if r["chunk_id"] == c[1]] in ([1.0], [])
    with raises_code(SqlState.INVALID_ARGUMENT, match="exact_keyword_weight"):
        rows(conn, "SELECT * FROM kb.hybrid_search('x', exact_keyword_weight => -1)")


def test_plain_queries_weigh_the_keyword_leg_by_the_idf_share_its_best_chunk_holds(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    # "vacuum" occurs in the corpus, "xylophone" nowhere: the keyword leg's best chunk holds only
    # vacuum's share of the query's IDF mass, and its weight shrinks to that share ** power
    c = golden.ids
    n = len(c)
    df = sum(
        1
        for (tsv,) in conn.execute("SELECT tsvector_to_array(tsv) FROM kb.chunks")
        if "vacuum" in tsv
    )
    idf_vacuum = math.log(1 + (n - df + 0.5) / (df + 0.5))
    idf_unknown = math.log(1 + (n + 0.5) / 0.5)
    share = idf_vacuum / (idf_vacuum + idf_unknown)
    kw = rows(conn, "SELECT chunk_id, rank FROM kb.keyword_search('vacuum xylophone', 3)")
    assert [r["chunk_id"] for r in kw] == [c[4], c[2]]
    sql = (
        "SELECT chunk_id, score FROM kb.hybrid_search('vacuum xylophone', NULL, "
        "match_count => 2, rrf_k => 10, keyword_weight => 1.0, keyword_confidence => %s)"
    )
    for power in (0.0, 1.0, 2.0):
        got = rows(conn, sql, (power,))
        weight = share**power
        assert [r["chunk_id"] for r in got] == [c[4], c[2]]
        assert [r["score"] for r in got] == pytest.approx([weight / 11, weight / 12], rel=1e-12)
    # every query word found in the best chunk: full weight, whatever the power
    full = rows(conn, sql.replace("vacuum xylophone", "vacuum"), (3.0,))
    assert [r["score"] for r in full] == pytest.approx([1 / 11, 1 / 12], rel=1e-12)
    # identifiers and quotes keep exact_keyword_weight: strong evidence by construction
    exact = rows(
        conn,
        "SELECT score FROM kb.hybrid_search('40P01 xylophone', NULL, match_count => 1, "
        "rrf_k => 10, exact_keyword_weight => 3.0, keyword_confidence => 2.0)",
    )
    assert [r["score"] for r in exact] == pytest.approx([3 / 11], rel=1e-12)
    with raises_code(SqlState.INVALID_ARGUMENT, match="keyword_confidence"):
        rows(conn, "SELECT * FROM kb.hybrid_search('x', keyword_confidence => -1)")


def test_max_per_document_keeps_each_documents_best_chunks(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    # q is nearest to chunk 0 (D1), then chunk 1 (D1), then chunks of D2 and D3: uncapped, D1's
    # two chunks come first; with a cap of 1 its second chunk gives way to the next document's
    c = golden.ids
    q = Vector([1.0, 0.3, 0.1])
    sql = (
        "SELECT chunk_id, document_id, score FROM kb.hybrid_search('xyzzy', %s, "
        "match_count => 3, max_per_document => %s)"
    )
    uncapped = rows(conn, sql, (q, None))
    assert [r["chunk_id"] for r in uncapped][:2] == [c[0], c[1]]
    capped = rows(conn, sql, (q, 1))
    docs = [r["document_id"] for r in capped]
    assert len(docs) == len(set(docs)) == 3
    # the kept rows are each document's best chunk, in the uncapped order and with its score
    everything = rows(conn, sql.replace("match_count => 3", "match_count => 10"), (q, None))
    best: dict[Any, dict[str, Any]] = {}
    for r in everything:
        best.setdefault(r["document_id"], r)
    assert capped == list(best.values())[:3]
    two = rows(conn, sql.replace("match_count => 3", "match_count => 10"), (q, 2))
    assert max(Counter(r["document_id"] for r in two).values()) == 2
    with raises_code(SqlState.INVALID_ARGUMENT, match="max_per_document"):
        conn.execute("SELECT * FROM kb.hybrid_search('xyzzy', %s, max_per_document => 0)", (q,))
    conn.rollback()


def test_null_embedding_is_keyword_only(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    got = rows(
        conn, "SELECT chunk_id, score, vector_rank, keyword_rank FROM kb.hybrid_search('vacuum')"
    )
    c = golden.ids
    assert [r["chunk_id"] for r in got] == [c[4], c[2]]
    assert [r["score"] for r in got] == pytest.approx(
        [1.5 / 11, 1.5 / 12]
    )  # keyword_weight (1.5; "vacuum" is the whole query, share 1) / (10 + rank)
    assert all(r["vector_rank"] is None for r in got)


def test_keyword_only_works_without_any_model(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO kb.documents (id, source_uri, title, content_sha) "
        "VALUES (%s, 'a.txt', 'A', 'x')",
        (D1,),
    )
    conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, "
        "token_count) VALUES (%s, 0, 'pg_dump writes archives', 'x', 4)",
        (D1,),
    )
    got = rows(conn, "SELECT title FROM kb.hybrid_search('pg_dump archive')")
    assert [r["title"] for r in got] == ["A"]


# --- filters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "document_ids", "expected"),
    [
        ('{"category": "configuration"}', None, [2, 3]),
        ('{"category": ["maintenance", "reference"]}', None, [0, 1, 4]),
        ('{"metadata": {"team": "ops"}}', None, [2, 3, 4]),
        ('{"metadata": {"team": "ops", "version": 15}}', None, [2, 3]),
        ('{"source": "routine-%"}', None, [4]),
        ('{"source": "%config%", "metadata": {"team": "db"}}', None, []),
        ("{}", [D1, D3], [0, 1, 4]),
        ('{"category": "reference"}', [D3], []),
    ],
)
def test_filters_apply_to_both_legs(
    conn: psycopg.Connection[Any],
    golden: Corpus,
    filters: str,
    document_ids: Any,
    expected: list[int],
) -> None:
    want = sorted(golden.ids[i] for i in expected)
    vec = rows(
        conn,
        "SELECT chunk_id FROM kb.vector_search('[1,1,1]', 10, %s::jsonb, %s)",
        (filters, document_ids),
    )
    assert sorted(r["chunk_id"] for r in vec) == want
    # every chunk contains one of these words
    words = "sqlstate serialization maintenance work_mem vacuum"
    kw = rows(
        conn,
        "SELECT chunk_id FROM kb.keyword_search(%s, 10, %s::jsonb, %s)",
        (words, filters, document_ids),
    )
    assert sorted(r["chunk_id"] for r in kw) == want
    hy = rows(
        conn,
        "SELECT chunk_id FROM kb.hybrid_search(%s, '[1,1,1]', 10, "
        "filters => %s::jsonb, document_ids => %s)",
        (words, filters, document_ids),
    )
    assert sorted(r["chunk_id"] for r in hy) == want


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (
            '{"catgory": "x"}',
            'unknown filter key "catgory"; valid keys are: category, metadata, source',
        ),
        ('{"category": 3}', 'filter "category" must be a string or an array of strings'),
        ('{"metadata": "team=ops"}', 'filter "metadata" must be a JSON object'),
        ('{"source": ["a"]}', 'filter "source" must be a string'),
        ("[1]", "filters must be a JSON object"),
    ],
)
def test_bad_filters_raise_clear_errors(
    conn: psycopg.Connection[Any], golden: Corpus, filters: str, message: str
) -> None:
    for call in (
        "kb.keyword_search('vacuum', filters => %s::jsonb)",
        "kb.vector_search('[1,0,0]', filters => %s::jsonb)",
        "kb.hybrid_search('vacuum', '[1,0,0]', filters => %s::jsonb)",
    ):
        with raises_code(SqlState.INVALID_ARGUMENT) as err:
            conn.execute(f"SELECT * FROM {call}", (filters,))
        assert message in str(err.value)
        conn.rollback()


def test_filter_values_are_data_not_sql(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    evil = '{"source": "x\'; DROP TABLE kb.chunks; --", "category": "a\') OR (1=1"}'
    assert (
        rows(
            conn,
            "SELECT * FROM kb.hybrid_search('vacuum', '[1,0,0]', filters => %s::jsonb)",
            (evil,),
        )
        == []
    )
    assert conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0] == 5


def test_iterative_scan_fills_a_filter_matching_one_percent(conn: psycopg.Connection[Any]) -> None:
    """2,000 chunks, 20 of them (1%) in category 'rare' and far from the query: the HNSW index
    alone (ef_search 40) would find none of them; the iterative scan returns all 20."""
    import random

    rng = random.Random(7)
    model_id = conn.execute("SELECT kb.register_model('golden', 3, 'test')").fetchone()[0]
    with conn.cursor() as cur:
        for d in range(100):
            rare = d % 100 == 0
            cur.execute(
                "INSERT INTO kb.documents (source_uri, title, content_sha, category) "
                "VALUES (%s, %s, 'x', %s) RETURNING id",
                (f"doc{d}", f"Doc {d}", "rare" if rare else "common"),
            )
            doc = cur.fetchone()[0]
            for i in range(20):
                cur.execute(
                    "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, "
                    "token_count) VALUES (%s, %s, %s, 'x', 3) RETURNING id",
                    (doc, i, f"text {d} {i}"),
                )
                chunk = cur.fetchone()[0]
                if rare:  # pointing away from the query [1, 0, 0]
                    v = [-1.0, rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1)]
                else:
                    v = [1.0, rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5)]
                cur.execute(
                    "INSERT INTO kb.embeddings VALUES (%s, %s, %s)", (chunk, model_id, Vector(v))
                )
    conn.execute("ANALYZE kb.documents, kb.chunks, kb.embeddings")
    conn.commit()
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = notice")
    # make the planner walk the HNSW index (as it does on big tables) instead of sorting the
    # 20 rare chunks exactly (its choice here, with 2,000 rows and an exact category estimate)
    conn.execute("SET enable_sort = off")
    got = rows(
        conn,
        "SELECT chunk_id, similarity FROM kb.vector_search('[1,0,0]', 20, "
        '\'{"category": "rare"}\')',
    )
    assert len(got) == 20
    assert all(r["similarity"] < 0 for r in got)
    assert f"Index Scan using embeddings_hnsw_model_{model_id}" in "\n".join(notices)
    # control: the same index walk without the iterative scan finds (almost) none of them
    conn.execute("SET hnsw.iterative_scan = off")
    plain = conn.execute(
        "SELECT e.chunk_id FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id "
        "JOIN kb.documents d ON d.id = c.document_id WHERE e.model_id = %s "
        "AND d.category = 'rare' ORDER BY e.embedding::vector(3) <=> '[1,0,0]' LIMIT 20",
        (model_id,),
    ).fetchall()
    assert len(plain) < 20
    conn.execute("RESET hnsw.iterative_scan")
    # the settings were local to the call
    assert conn.execute("SHOW hnsw.iterative_scan").fetchone()[0] == "off"
    assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "40"


def test_the_fusion_is_planned_once_per_session_and_reads_the_keyword_share_once(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    """kb.hybrid_search's own statement runs a generic plan (planned once per session: a plan
    made for each call cost more than the fusion), so its plan shows the call's values as
    parameters; and the keyword leg's share, read twice by the fusion, is computed once."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = notice")
    for _ in range(7):  # past the plan cache's five custom plans
        notices.clear()
        got = rows(conn, "SELECT chunk_id FROM kb.hybrid_search('vacuum', '[0,0.6,0.8]')")
    assert [r["chunk_id"] for r in got][:1] == [golden.ids[4]]
    fusion = [n for n in notices if "fused AS" in n]
    assert len(fusion) == 1
    plan = fusion[0].split("fused AS", 1)[1]
    # a custom plan has the call's values folded in as constants (max_per_document NULL drops
    # its filter); the generic plan keeps them as parameters
    assert re.search(r"nth <= \$\d+\)", plan)
    assert plan.count("CTE share") == 1
    # the scalar subquery reading the keyword leg's best chunk is in the plan once
    assert plan.count("Index Cond: (id = (InitPlan") == 1


# --- bad input ------------------------------------------------------------------------------


BAD_QUERIES = [
    "",
    "   ",
    "the of and a is",
    "!!! ??? ... ,,, ;;;",
    "'); DROP TABLE kb.chunks; --",
    "SELECT * FROM kb.chunks WHERE 1=1 OR ''='",
    '"unbalanced quote',
    "unbalanced' quote\"",
    "a & b | !c <-> (d",
    "\\ \\\\ '\\'",
    "-vacuum",
    '""',
    "vacuum " * 20_000,  # 140 KB
    "".join(chr(c) for c in range(32, 1200)) * 20,
    "\u00e9t\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001f600",
]


@pytest.mark.parametrize("query", BAD_QUERIES, ids=range(len(BAD_QUERIES)))
def test_any_query_text_returns_rows_or_nothing(
    conn: psycopg.Connection[Any], golden: Corpus, query: str
) -> None:
    for ranking in ("bm25", "ts_rank"):
        rows(conn, "SELECT * FROM kb.keyword_search(%s, keyword_ranking => %s)", (query, ranking))
        rows(
            conn,
            "SELECT * FROM kb.hybrid_search(%s, '[1,0,0]', keyword_ranking => %s)",
            (query, ranking),
        )
        rows(conn, "SELECT * FROM kb.hybrid_search(%s)", (query,))
    assert conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0] == 5


def test_huge_query_still_ranks(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    got = rows(conn, "SELECT chunk_id FROM kb.keyword_search(%s)", ("vacuum " * 20_000,))
    assert got[0]["chunk_id"] == golden.ids[4]


def test_null_and_zero_arguments(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    assert rows(conn, "SELECT * FROM kb.keyword_search(NULL)") == []
    assert rows(conn, "SELECT * FROM kb.hybrid_search(NULL, NULL)") == []
    assert rows(conn, "SELECT * FROM kb.hybrid_search('vacuum', match_count => 0)") == []
    assert rows(conn, "SELECT * FROM kb.vector_search(NULL)") == []
    assert len(rows(conn, "SELECT * FROM kb.hybrid_search(NULL, '[1,0,0]')")) == 5


# --- neighbours and reading -------------------------------------------------------------------


def _long_document(
    conn: psycopg.Connection[Any], indexes: list[int], overlap: bool = False
) -> list[int]:
    conn.execute(
        "INSERT INTO kb.documents (id, source_uri, title, content_sha) "
        "VALUES (%s, 'manual.html', 'Manual', 'x')",
        (D1,),
    )
    ids = []
    for n, index in enumerate(indexes):
        heading = "Intro" if n < 2 else ("Setup > Install" if n < 4 else "Setup > Configure")
        content = (
            f"Part {index} text."
            if not overlap
            else ((f"tail of {index - 1}. " if n else "") + f"body {index} and tail of {index}.")
        )
        ids.append(
            conn.execute(
                "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, "
                "content_sha, "
                "token_count) VALUES (%s, %s, %s, %s, 'x', 10) RETURNING id",
                (D1, index, heading, content),
            ).fetchone()[0]
        )
    return ids


def test_neighbor_chunks_in_document_order(conn: psycopg.Connection[Any]) -> None:
    ids = _long_document(conn, [0, 1, 2, 5, 6, 9])  # gaps in chunk_index
    got = rows(
        conn,
        "SELECT chunk_id, chunk_index, is_hit, token_count FROM kb.neighbor_chunks(%s)",
        (ids[2],),
    )
    assert [(r["chunk_id"], r["is_hit"]) for r in got] == [
        (ids[1], False),
        (ids[2], True),
        (ids[3], False),
    ]
    got = rows(
        conn, "SELECT chunk_index FROM kb.neighbor_chunks(%s, before => 5, after => 0)", (ids[3],)
    )
    assert [r["chunk_index"] for r in got] == [0, 1, 2, 5]
    got = rows(conn, "SELECT chunk_index FROM kb.neighbor_chunks(%s, 0, 2)", (ids[5],))
    assert [r["chunk_index"] for r in got] == [9]
    assert rows(conn, "SELECT * FROM kb.neighbor_chunks(-1)") == []


def test_merge_neighbors_removes_overlap(conn: psycopg.Connection[Any]) -> None:
    ids = _long_document(conn, [0, 1, 2, 3], overlap=True)
    got = rows(conn, "SELECT * FROM kb.merge_neighbors(%s, 1, 1)", (ids[1],))
    assert len(got) == 1
    r = got[0]
    assert (r["chunk_start"], r["chunk_end"], r["hit_chunk_id"]) == (0, 2, ids[1])
    assert r["content"] == "body 0 and tail of 0. body 1 and tail of 1. body 2 and tail of 2."
    assert r["title"] == "Manual" and r["heading_path"] == "Intro" and r["token_count"] == 30
    plain = _long_document_plain(conn)
    got = rows(conn, "SELECT content FROM kb.merge_neighbors(%s, 0, 1)", (plain[0],))
    assert got[0]["content"] == "First.\n\nSecond."


def _long_document_plain(conn: psycopg.Connection[Any]) -> list[int]:
    conn.execute(
        "INSERT INTO kb.documents (id, source_uri, title, content_sha) "
        "VALUES (%s, 'b.txt', 'B', 'x')",
        (D2,),
    )
    return [
        conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count) "
            "VALUES (%s, %s, %s, 'x', 1) RETURNING id",
            (D2, i, t),
        ).fetchone()[0]
        for i, t in enumerate(["First.", "Second."])
    ]


def test_read_document_within_budget_returns_chunks(conn: psycopg.Connection[Any]) -> None:
    ids = _long_document(conn, [0, 1, 2, 3, 4, 5])
    got = rows(conn, "SELECT * FROM kb.read_document(%s, token_budget => 60)", (D1,))
    assert {r["status"] for r in got} == {"chunks"}
    assert [r["chunk_id"] for r in got] == ids
    assert got[0]["chunk_count"] == 6 and got[0]["range_tokens"] == 60
    got = rows(conn, "SELECT * FROM kb.read_document(%s, 2, 3, 20)", (D1,))
    assert [(r["status"], r["chunk_index"], r["content"]) for r in got] == [
        ("chunks", 2, "Part 2 text."),
        ("chunks", 3, "Part 3 text."),
    ]
    assert len(rows(conn, "SELECT * FROM kb.read_document(%s)", (D1,))) == 6  # no budget


def test_read_document_over_budget_returns_only_the_outline(conn: psycopg.Connection[Any]) -> None:
    _long_document(conn, [0, 1, 2, 3, 4, 5])
    got = rows(conn, "SELECT * FROM kb.read_document(%s, token_budget => 59)", (D1,))
    assert [
        (r["status"], r["heading_path"], r["chunk_index"], r["last_chunk_index"], r["token_count"])
        for r in got
    ] == [
        ("outline", "Intro", 0, 1, 20),
        ("outline", "Setup > Install", 2, 3, 20),
        ("outline", "Setup > Configure", 4, 5, 20),
    ]
    assert all(r["content"] is None and r["chunk_id"] is None for r in got)
    assert got[0]["chunk_count"] == 6 and got[0]["range_tokens"] == 60
    got = rows(conn, "SELECT status, heading_path FROM kb.read_document(%s, 3, NULL, 15)", (D1,))
    assert [(r["status"], r["heading_path"]) for r in got] == [
        ("outline", "Setup > Install"),
        ("outline", "Setup > Configure"),
    ]


def test_read_document_outline_keeps_repeated_headings_apart(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO kb.documents (id, source_uri, title, content_sha) "
        "VALUES (%s, 'c.txt', 'C', 'x')",
        (D3,),
    )
    for i, h in enumerate(["A", "A", "B", "A"]):
        conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, "
            "content_sha, token_count) VALUES (%s, %s, %s, 'x', 'x', 5)",
            (D3, i, h),
        )
    got = rows(
        conn,
        "SELECT heading_path, chunk_index, last_chunk_index "
        "FROM kb.read_document(%s, token_budget => 1)",
        (D3,),
    )
    assert [tuple(r.values()) for r in got] == [("A", 0, 1), ("B", 2, 2), ("A", 3, 3)]


def test_read_document_unknown_or_empty(conn: psycopg.Connection[Any]) -> None:
    _long_document(conn, [0, 1])
    got = rows(conn, "SELECT status, document_id, chunk_count FROM kb.read_document(%s)", (D2,))
    assert got == [{"status": "not_found", "document_id": D2, "chunk_count": 0}]
    got = rows(conn, "SELECT status, chunk_count, chunk_id FROM kb.read_document(%s, 7, 9)", (D1,))
    assert got == [{"status": "empty", "chunk_count": 2, "chunk_id": None}]


# --- read-only use ----------------------------------------------------------------------------


def test_retrieval_functions_are_stable(conn: psycopg.Connection[Any]) -> None:
    volatility = dict(
        conn.execute(
            "SELECT proname, provolatile FROM pg_proc WHERE pronamespace = 'kb'::regnamespace "
            "AND proname IN ('hybrid_search', 'vector_search', 'keyword_search', "
            "'neighbor_chunks', "
            "'merge_neighbors', 'read_document', 'search_query', 'search_filters')"
        ).fetchall()
    )
    assert len(volatility) == 8
    assert set(volatility.values()) <= {"s", "i"}


def test_search_under_a_parallel_plan(conn: psycopg.Connection[Any], golden: Corpus) -> None:
    """A query that PostgreSQL runs in parallel mode must not fail on the hnsw settings."""
    conn.execute("SET debug_parallel_query = on")
    assert rows(conn, "SELECT * FROM kb.hybrid_search('vacuum', '[0,0,1]')")
    assert rows(conn, "SELECT * FROM kb.vector_search('[0,0,1]')")
    assert rows(conn, "SELECT * FROM kb.keyword_search('vacuum')")


def test_search_runs_in_a_read_only_transaction(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    """What a hot standby allows: no writes, no temp tables."""
    conn.execute("SET TRANSACTION READ ONLY")
    assert rows(conn, "SELECT * FROM kb.hybrid_search('vacuum', '[0,0,1]')")
    assert rows(conn, "SELECT * FROM kb.read_document(%s)", (D3,))
    assert rows(conn, "SELECT * FROM kb.merge_neighbors(%s)", (golden.ids[0],))


def test_kb_reader_can_search_and_read_nothing_else(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    conn.execute("SET ROLE kb_reader")
    assert (
        rows(conn, "SELECT chunk_id FROM kb.hybrid_search('vacuum', '[0,0,1]', 1)")[0]["chunk_id"]
        == golden.ids[4]
    )
    assert rows(conn, "SELECT * FROM kb.keyword_search('vacuum')")
    assert rows(conn, "SELECT * FROM kb.vector_search('[0,0,1]')")
    assert rows(conn, "SELECT * FROM kb.neighbor_chunks(%s)", (golden.ids[0],))
    assert rows(conn, "SELECT * FROM kb.merge_neighbors(%s)", (golden.ids[0],))
    assert rows(conn, "SELECT * FROM kb.read_document(%s)", (D1,))
    conn.commit()
    for statement in (
        "SELECT * FROM kb.chunks",
        "SELECT * FROM kb.documents",
        "SELECT * FROM kb.embeddings",
        "SELECT * FROM kb.settings",
        "INSERT INTO kb.documents (source_uri, title, content_sha) VALUES ('x', 'x', 'x')",
        "DELETE FROM kb.chunks",
        "SELECT kb.register_model('evil', 3, 'x')",
        "SELECT kb.activate_model('golden', 3)",
    ):
        conn.execute("SET ROLE kb_reader")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)
        conn.rollback()
    conn.execute("RESET ROLE")
    assert conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0] == 5


def test_search_functions_are_not_executable_by_public(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE ROLE pgkb_test_stranger NOLOGIN")
    conn.execute("GRANT USAGE ON SCHEMA kb TO pgkb_test_stranger")
    conn.execute("SET ROLE pgkb_test_stranger")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM kb.hybrid_search('vacuum')")
    conn.rollback()
