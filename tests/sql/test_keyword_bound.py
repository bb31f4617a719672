"""The keyword leg's work bound: kb.term_postings (impact-ordered postings of the lexemes held by
more than 100 chunks) kept exact by the statistics trigger, and kb.keyword_search reading a
common word's best postings from it with the ranking of the exact sum."""

from __future__ import annotations

import random
import uuid
from typing import Any

import psycopg

from loader.db import queries

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]


def _document(conn: psycopg.Connection[Any], uri: str | None = None) -> uuid.UUID:
    """A new document row (``mem://<its id>`` unless ``uri`` is given), for chunks to load."""
    doc = uuid.uuid4()
    conn.execute(
        "INSERT INTO kb.documents (id, source_uri, title, content_sha) VALUES (%s, %s, 't', 'x')",
        (doc, uri or f"mem://{doc}"),
    )
    return doc


def _load(conn: psycopg.Connection[Any], n: int, seed: int = 7) -> uuid.UUID:
    """One document of ``n`` chunks: every chunk says 'chapter' 1 to 4 times among other words."""
    rnd = random.Random(seed)
    doc = _document(conn)
    with conn.cursor().copy(
        "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
        "token_count) FROM STDIN"
    ) as copy:
        for i in range(n):
            words = ["chapter"] * rnd.randint(1, 4) + rnd.sample(WORDS, rnd.randint(2, 8))
            words += [f"rare{i}"]
            rnd.shuffle(words)
            copy.write_row((doc, i, "", " ".join(words), f"s{i}", len(words)))
    return doc


def _expected(conn: psycopg.Connection[Any]) -> set[tuple[str, float, int]]:
    rows = conn.execute(
        """
        SELECT i.lexeme, i.impact, c.id
          FROM kb.chunks c, kb.term_impacts(c.tsv) AS i, kb.term_stats t
         WHERE t.lexeme = i.lexeme AND t.df > 100
        """
    ).fetchall()
    return {(r[0], r[1], r[2]) for r in rows}


def _stored(conn: psycopg.Connection[Any]) -> set[tuple[str, float, int]]:
    rows = conn.execute("SELECT lexeme, impact, chunk_id FROM kb.term_postings").fetchall()
    return {(r[0], r[1], r[2]) for r in rows}


def test_the_trigger_keeps_the_common_lexemes_lists_whole(conn: psycopg.Connection[Any]) -> None:
    doc = _load(conn, 90)
    assert _stored(conn) == set()  # nothing is held by more than 100 chunks yet
    _load(conn, 30, seed=8)  # 'chapter' passes 100: its whole list, both loads' chunks
    stored = _stored(conn)
    assert stored == _expected(conn)
    assert {lexeme for lexeme, _, _ in stored} == {"chapter"}
    assert len(stored) == 120
    conn.execute(
        "DELETE FROM kb.chunks WHERE document_id = %s AND chunk_index < 10", (doc,)
    )  # 110 left: the list loses those 10 postings
    assert _stored(conn) == _expected(conn) and len(_stored(conn)) == 110
    conn.execute("UPDATE kb.chunks SET content = content || ' chapter' WHERE chunk_index = 15")
    assert _stored(conn) == _expected(conn)  # the updated chunks' impacts changed
    conn.execute("DELETE FROM kb.chunks WHERE document_id = %s AND chunk_index < 30", (doc,))
    assert _stored(conn) == set()  # 90 left: no list


def test_a_common_word_reads_its_list_with_the_exact_ranking(
    conn: psycopg.Connection[Any],
) -> None:
    _load(conn, 1500)
    conn.commit()
    # one common word, or one with a rarer word that generates through the GIN index
    for query in ("chapter", "chapter alpha"):
        bounded = conn.execute(
            "SELECT chunk_id, score FROM kb.keyword_search(%s, 20, max_postings => 200)",
            (query,),
        ).fetchall()
        exact = conn.execute(
            "SELECT chunk_id, score FROM kb.keyword_search(%s, 20, max_postings => NULL)",
            (query,),
        ).fetchall()
        assert len(bounded) == 20
        assert [round(s, 9) for _, s in bounded] == [round(s, 9) for _, s in exact], query
    # the rare word's chunk comes first, its common words read from their lists or not at all
    top = conn.execute(
        "SELECT c.chunk_index FROM kb.keyword_search('chapter rare7 bravo', 1, "
        "max_postings => 200) k JOIN kb.chunks c ON c.id = k.chunk_id"
    ).fetchone()
    assert top == (7,)
    # a filter that no listed chunk passes gives no rows, never another category's
    none = conn.execute(
        "SELECT count(*) FROM kb.keyword_search('chapter', 20, '{\"category\": \"nowhere\"}')"
    ).fetchone()
    assert none == (0,)


def test_the_budget_goes_to_the_postings_that_weigh_most(conn: psycopg.Connection[Any]) -> None:
    """Three common words, one in every chunk (an IDF near zero): the budget goes to the postings
    of the two that weigh, so the ten chunks holding both (each list's 41st to 50th best) are
    found; an equal split (a third of the budget per list) stopped at each list's 33rd."""
    filler = "golf hotel india juliet kilo lima"
    texts = (
        ["chapter " * 5] * 40  # 'chapter''s best postings
        + ["alpha alpha alpha chapter"] * 40  # 'alpha''s best: one word, three times
        + ["bravo bravo bravo chapter"] * 40
        + ["alpha alpha bravo bravo chapter"] * 10  # both words, twice: the best chunks
        + ["alpha chapter"] * 1100
        + ["bravo chapter"] * 1100
        + ["chapter"] * 2670
    )
    doc = _document(conn, "mem://w")
    with conn.cursor().copy(
        "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
        "token_count) FROM STDIN"
    ) as copy:
        for i, text in enumerate(texts):
            copy.write_row((doc, i, "", f"{text} {filler}", f"s{i}", 10))
    conn.commit()
    both = set(range(120, 130))
    for budget in (100, None):
        top = conn.execute(
            "SELECT c.chunk_index FROM kb.keyword_search('alpha bravo chapter', 10, "
            "max_postings => %s) k JOIN kb.chunks c ON c.id = k.chunk_id",
            (budget,),
        ).fetchall()
        assert {r[0] for r in top} == both, budget


def test_many_lexemes_passing_at_once_are_listed_by_one_pass(
    conn: psycopg.Connection[Any],
) -> None:
    """More than 16 lexemes crossing 100 in one statement: the pass over the stored chunks."""
    doc = _document(conn, "mem://m")
    words = " ".join(f"word{chr(97 + k)}" for k in range(20))
    for start, n in ((0, 90), (90, 15)):
        with conn.cursor().copy(
            "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
            "token_count) FROM STDIN"
        ) as copy:
            for i in range(start, start + n):
                copy.write_row((doc, i, "", f"{words} {'chapter ' * (i % 3)}", f"s{i}", 25))
    stored = _stored(conn)
    assert stored == _expected(conn)
    lexemes = {lexeme for lexeme, _, _ in stored}  # the English stemmer merges a few words
    assert len(lexemes) > 16 and len(stored) == len(lexemes) * 105


# --- the bulk path: one statement loading a corpus recomputes the statistics set-wise ----------


def _copy_rows(conn: psycopg.Connection[Any], doc: uuid.UUID, rows: list[tuple[int, str]]) -> None:
    """One statement loading ``rows``, the way the loader writes: COPY straight into kb.chunks,
    or, for a writer row-level security applies to (PostgreSQL refuses it COPY), COPY into the
    loader's staging table and one INSERT ... SELECT from it."""
    row = conn.execute(queries.ROW_SECURITY_ACTIVE).fetchone()
    staged = bool(row and row[0])
    if staged:
        conn.execute(queries.CREATE_STAGING)
    target = "pg_temp.pgkb_chunks_in" if staged else "kb.chunks"
    with conn.cursor().copy(
        f"COPY {target} (document_id, chunk_index, heading_path, content, content_sha, "
        "token_count) FROM STDIN"
    ) as copy:
        for i, text in rows:
            copy.write_row((doc, i, f"part {i % 7}", text, f"s{i}", len(text.split())))
    if staged:
        conn.execute(queries.INSERT_STAGED_CHUNKS)


def _statistics(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Every keyword statistic, chunks named by document and index (ids differ between loads)."""
    return {
        "terms": set(conn.execute("SELECT lexeme, df FROM kb.term_stats").fetchall()),
        "corpus": conn.execute("SELECT chunk_count, total_lexemes FROM kb.corpus_stats").fetchone(),
        "postings": set(
            conn.execute(
                "SELECT p.lexeme, p.impact, c.document_id, c.chunk_index FROM kb.term_postings p "
                "JOIN kb.chunks c ON c.id = p.chunk_id"
            ).fetchall()
        ),
    }


def _recomputed(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The same statistics computed from kb.chunks directly, by neither path."""
    return {
        "terms": set(
            conn.execute(
                "SELECT l.lexeme, count(*)::integer FROM kb.chunks c, unnest(c.tsv) l GROUP BY 1"
            ).fetchall()
        ),
        "corpus": conn.execute(
            "SELECT count(*), coalesce(sum(length(tsv)), 0) FROM kb.chunks"
        ).fetchone(),
        "postings": set(
            conn.execute(
                """
                SELECT i.lexeme, i.impact, c.document_id, c.chunk_index
                  FROM kb.chunks c, kb.term_impacts(c.tsv) AS i
                 WHERE i.lexeme IN (SELECT l.lexeme FROM kb.chunks x, unnest(x.tsv) l
                                     GROUP BY 1 HAVING count(*) > 100)
                """
            ).fetchall()
        ),
    }


def _postings_index(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT 'kb.term_postings_pkey'::regclass::oid::bigint").fetchone()
    assert row is not None
    return int(row[0])


def test_a_bulk_load_gives_the_statistics_row_by_row_inserts_give(
    conn: psycopg.Connection[Any],
) -> None:
    """10,500 chunks in one statement by the writer (the bulk path: the postings index is built
    anew) against the same chunks inserted 1,500 at a time (the row-wise upkeep): equal statistics,
    postings and impacts, both equal to a direct computation; then removals and updates keep
    them right, and a second bulk statement that does not double the corpus is row-wise."""
    rnd = random.Random(11)
    rows = []
    for i in range(10_500):
        words = ["chapter"] * rnd.randint(1, 4) + rnd.sample(WORDS, rnd.randint(2, 8))
        words += [f"rare{i % 3000}"] + (["table"] * rnd.randint(1, 3) if i % 9 == 0 else [])
        rnd.shuffle(words)
        rows.append((i, " ".join(words)))
    doc = _document(conn, "mem://b")
    conn.execute("GRANT kb_writer TO CURRENT_USER")  # the test's admin may set the role
    conn.execute("SET ROLE kb_writer")
    before = _postings_index(conn)
    _copy_rows(conn, doc, rows)
    assert _postings_index(conn) != before, "one COPY of 10,500 chunks took the row-wise path"
    bulk = _statistics(conn)
    assert bulk == _recomputed(conn)
    assert {p[0] for p in bulk["postings"]} >= {"chapter", "alpha", "tabl"}
    assert bulk["corpus"][0] == 10_500

    conn.execute("DELETE FROM kb.chunks WHERE document_id = %s", (doc,))
    assert _statistics(conn) == {"terms": set(), "corpus": (0, 0), "postings": set()}
    before = _postings_index(conn)
    for start in range(0, len(rows), 1500):
        _copy_rows(conn, doc, rows[start : start + 1500])
    assert _postings_index(conn) == before  # row-wise upkeep all along
    assert _statistics(conn) == bulk

    # removals and updates after a bulk load: row-wise, still exact
    conn.execute("DELETE FROM kb.chunks WHERE document_id = %s AND chunk_index >= 10400", (doc,))
    conn.execute(
        "UPDATE kb.chunks SET content = content || ' table table' WHERE chunk_index % 50 = 0"
    )
    assert _statistics(conn) == _recomputed(conn)
    # 10,000 more chunks do not double 10,400: row-wise (the index kept), still exact
    before = _postings_index(conn)
    _copy_rows(conn, doc, [(20_000 + i, text) for i, text in rows[:10_000]])
    assert _postings_index(conn) == before
    assert _statistics(conn) == _recomputed(conn)
    conn.execute("RESET ROLE")
    conn.rollback()


def test_a_deferred_load_is_made_exact_by_one_rebuild(conn: psycopg.Connection[Any]) -> None:
    """pgkb.defer_keyword_stats: a loader writing in several statements (or connections) leaves
    the statistics alone, then one kb.rebuild_keyword_stats() gives what the trigger would."""
    doc = _load(conn, 70)
    conn.commit()
    kept = _statistics(conn)
    conn.execute("SET LOCAL pgkb.defer_keyword_stats = 'on'")
    _load(conn, 40, seed=9)  # 'chapter' passes 100: untouched while deferred
    conn.execute("DELETE FROM kb.chunks WHERE document_id = %s AND chunk_index < 2", (doc,))
    assert _statistics(conn) == kept
    conn.execute("SET ROLE kb_writer")
    counts = conn.execute("SELECT kb.rebuild_keyword_stats()").fetchone()
    assert counts == ({"chunks": 108, "lexemes": len(_recomputed(conn)["terms"]), "postings": 108},)
    assert _statistics(conn) == _recomputed(conn) and len(_statistics(conn)["postings"]) == 108
    conn.rollback()


def test_the_impacts_follow_the_documented_formula(conn: psycopg.Connection[Any]) -> None:
    """kb.term_impacts (the row-wise path) and kb.rebuild_keyword_stats (the same expression
    inlined) both compute tf * 1.9 / (tf + 0.9 * (0.25 + 0.75 * dl / 80)): checked here against
    Python's own arithmetic, so a change to both at once cannot pass unseen. tf is a lexeme's
    positions (1 without any), dl the distinct lexemes of the tsvector."""
    cases = [
        "chapter",
        "chapter chapter chapter table",
        " ".join(f"w{k}x" for k in range(300)) + " chapter" * 5,
    ]
    for text in cases:
        for tsv in (
            f"to_tsvector('english', '{text}')",
            f"strip(to_tsvector('english', '{text}'))",
        ):
            rows = conn.execute(
                f"SELECT i.lexeme, i.impact, length({tsv}), "
                f"coalesce(array_length(u.positions, 1), 1) "
                f"FROM kb.term_impacts({tsv}) i JOIN unnest({tsv}) u ON u.lexeme = i.lexeme"
            ).fetchall()
            assert rows, text
            for lexeme, impact, dl, tf in rows:
                expected = tf * 1.9 / (tf + 0.9 * (0.25 + 0.75 * dl / 80))
                assert abs(impact - expected) <= 1e-6 * expected, (lexeme, impact, expected)
    row = conn.execute(
        "SELECT count(DISTINCT i.impact) FROM kb.term_impacts(to_tsvector('english', "
        "'chapter chapter table')) i"
    ).fetchone()
    assert row == (2,)  # tf 2 and tf 1: two impacts


def test_the_rebuild_stores_the_impacts_kb_term_impacts_gives(
    conn: psycopg.Connection[Any],
) -> None:
    """The rebuild's inlined expression and kb.term_impacts agree bit for bit (the row-wise
    trigger finds a posting again by its impact), over chunks of very different lengths and
    term frequencies; the postings' lexemes compare in the C collation."""
    doc = _document(conn, "mem://i")
    rnd = random.Random(5)
    rows = []
    for i in range(1_100):
        words = ["chapter"] * rnd.randint(1, 40) + [
            f"v{rnd.randint(0, 5000)}x" for _ in range(rnd.randint(0, 400))
        ]
        rows.append((i, " ".join(words)))
    _copy_rows(conn, doc, rows)
    conn.execute("SELECT kb.rebuild_keyword_stats()")
    stored = conn.execute(
        "SELECT p.lexeme, p.impact, p.chunk_id FROM kb.term_postings p ORDER BY 3, 1"
    ).fetchall()
    direct = conn.execute(
        "SELECT i.lexeme, i.impact, c.id FROM kb.chunks c, kb.term_impacts(c.tsv) i "
        "WHERE i.lexeme IN ('chapter', 'part', '0', '1', '2', '3', '4', '5', '6') ORDER BY 3, 1"
    ).fetchall()
    # 'part' and one digit in every chunk's heading (each digit held by 157 chunks)
    assert len(stored) == 3_300 and stored == direct
    assert len({impact for _, impact, _ in stored}) > 100  # varied impacts, not one value
    row = conn.execute(
        "SELECT collation_name FROM information_schema.columns "
        "WHERE table_schema = 'kb' AND table_name = 'term_postings' AND column_name = 'lexeme'"
    ).fetchone()
    assert row == ("C",)
    conn.rollback()


def test_weighing_words_read_from_the_postings_choose_by_bm25(
    conn: psycopg.Connection[Any],
) -> None:
    """The words that only weigh in the choice (held by 101 to 1,000 chunks, beyond the whole
    candidates' budget) are read from kb.term_postings, no chunk row, each posting weighing idf *
    impact: the 100 chunks chosen among the 230 holding both weighing words are their best by
    BM25, so the top 20 equal the exact ranking (every posting read). Reading no posting, or
    weighing each by idf alone (all 230 equal, the newest chosen), gives other top 20s."""
    rnd = random.Random(11)
    doc = _document(conn, "mem://p")
    # 'alpha' in 150 chunks (whole with max_postings 250), 'charlie' in about 230 and 'bravo' in
    # about 460 (both weigh), 'delta' in all 2,000 (listed)
    rows = []
    for i in range(2_000):
        words = ["delta"] * rnd.randint(1, 3) + [f"w{rnd.randint(0, 3000)}" for _ in range(30)]
        if i < 150:  # alpha's chunks hold neither weighing word
            words += ["alpha"]
        elif rnd.random() < 0.25:  # half of bravo's chunks hold charlie too
            words += ["bravo"] * rnd.randint(1, 3)
            words += ["charlie"] * rnd.randint(1, 3) * (rnd.random() < 0.5)
        words += [f"w{rnd.randint(0, 3000)}" for _ in range(rnd.randint(0, 40))]  # lengths vary
        rnd.shuffle(words)
        rows.append((i, " ".join(words)))
    _copy_rows(conn, doc, rows)
    df = dict(
        conn.execute(
            "SELECT lexeme, df FROM kb.term_stats WHERE lexeme IN ('bravo', 'charli')"
        ).fetchall()
    )
    assert all(100 < n <= 1000 for n in df.values()) and len(df) == 2, df
    posted = conn.execute(
        "SELECT count(*) FROM kb.term_postings WHERE lexeme IN ('bravo', 'charli')"
    ).fetchone()
    assert posted == (sum(df.values()),)
    call = (
        "SELECT chunk_id, rank, round(score::numeric, 9) FROM kb.keyword_search(%s, 20, %s, "
        "max_postings => %s)"
    )
    # with no filter (the planned statement), by collection (the same), by source (the
    # statement built for the call): the postings narrowed to their chunks
    for filters in ("{}", '{"collections": ["default"]}', '{"source": "mem://%"}'):
        for query in ("alpha bravo charlie", "alpha bravo charlie delta"):
            bounded = conn.execute(call, (query, filters, 250)).fetchall()
            exact = conn.execute(call, (query, filters, None)).fetchall()
            assert len(bounded) == 20 and bounded == exact, (query, filters)
