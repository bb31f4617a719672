"""Schema invariants: one vector space per model, keyword statistics kept by the trigger."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pgvector import Vector

from loader.errors import SqlState
from tests.helpers import raises_code

CORPUS = "SELECT chunk_count, total_lexemes FROM kb.corpus_stats"


def _document(conn: psycopg.Connection[Any], uri: str) -> str:
    row = conn.execute(
        "INSERT INTO kb.documents (source_uri, title, content_sha) "
        "VALUES (%s, %s, 'x') RETURNING id",
        (uri, uri),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _chunk(conn: psycopg.Connection[Any], doc: str, index: int, content: str) -> int:
    row = conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count) "
        "VALUES (%s, %s, %s, md5(%s), 1) RETURNING id",
        (doc, index, content, content),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_embedding_of_the_wrong_dimension_is_refused(conn: psycopg.Connection[Any]) -> None:
    model = conn.execute("SELECT kb.register_model('m3', 3, 'test')").fetchone()
    assert model is not None
    chunk = _chunk(conn, _document(conn, "a"), 0, "text")
    conn.execute(
        "INSERT INTO kb.embeddings VALUES (%s, %s, %s)", (chunk, model[0], Vector([1, 0, 0]))
    )
    with raises_code(SqlState.DIMENSION_MISMATCH, match="has 2 dimensions, but model m3"):
        conn.execute(
            "INSERT INTO kb.embeddings VALUES (%s, %s, %s)", (chunk, model[0], Vector([1, 0]))
        )


def test_register_model_is_idempotent_and_first_is_active(conn: psycopg.Connection[Any]) -> None:
    first = conn.execute("SELECT kb.register_model('a', 3, 'p')").fetchone()
    again = conn.execute("SELECT kb.register_model('a', 3, 'p')").fetchone()
    second = conn.execute("SELECT kb.register_model('b', 4, 'p')").fetchone()
    assert first == again and second != first
    assert conn.execute("SELECT name FROM kb.active_model()").fetchone() == ("a",)
    conn.execute("SELECT kb.activate_model('b', 4)")
    assert conn.execute("SELECT name, dims FROM kb.active_model()").fetchone() == ("b", 4)
    with raises_code(SqlState.MODEL_NOT_REGISTERED, match="not registered"):
        conn.execute("SELECT kb.activate_model('c', 4)")


def test_term_statistics_follow_inserts_and_deletes(conn: psycopg.Connection[Any]) -> None:
    doc = _document(conn, "d")
    _chunk(conn, doc, 0, "vacuum reclaims storage")
    _chunk(conn, doc, 1, "vacuum vacuum analyze")
    df = dict(conn.execute("SELECT lexeme, df FROM kb.term_stats").fetchall())
    assert df["vacuum"] == 2 and df["analyz"] == 1 and df["reclaim"] == 1
    # lengths in distinct lexemes: {vacuum, reclaim, storag} + {vacuum, analyz}
    assert conn.execute(CORPUS).fetchone() == (2, 5)
    assert conn.execute("SELECT sum(df) FROM kb.term_stats").fetchone() == (5,)
    conn.execute("DELETE FROM kb.chunks WHERE chunk_index = 0")
    df = dict(conn.execute("SELECT lexeme, df FROM kb.term_stats").fetchall())
    assert df == {"vacuum": 1, "analyz": 1}
    assert conn.execute(CORPUS).fetchone() == (1, 2)
    conn.execute("DELETE FROM kb.documents")  # cascades to chunks, and the trigger follows
    assert conn.execute("SELECT count(*) FROM kb.term_stats").fetchone() == (0,)
    assert conn.execute(CORPUS).fetchone() == (0, 0)


def test_relations_have_no_self_loops_and_one_edge_per_type(conn: psycopg.Connection[Any]) -> None:
    a, b = _document(conn, "a"), _document(conn, "b")
    insert = (
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type) "
        "VALUES (%s, %s, %s)"
    )
    conn.execute(insert, (a, b, "references"))
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(insert, (a, a, "references"))
    conn.rollback()
    a, b = _document(conn, "a"), _document(conn, "b")
    conn.execute(insert, (a, b, "references"))
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(insert, (a, b, "references"))


def test_a_long_chunks_lexemes_stay_in_its_row(conn: psycopg.Connection[Any]) -> None:
    """The keyword leg reads the tsvector of every candidate: it is stored in the chunk's row
    (STORAGE MAIN), so a long chunk's content goes to the TOAST table instead of its lexemes."""
    from tests.helpers import load_chunks

    rng = __import__("random").Random(5)
    # 300 distinct made-up words: a tsvector of about 4 kB that pglz cannot shrink much
    words = ["".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(9)) for _ in range(300)]
    (long_id,) = load_chunks(conn, [("long.html", "Long", " ".join(words))])
    row = conn.execute(
        "SELECT pg_column_toast_chunk_id(tsv) IS NULL, pg_column_size(tsv) > 2048,"
        " pg_column_toast_chunk_id(content) IS NOT NULL OR pg_column_compression(content)"
        " IS NOT NULL FROM kb.chunks WHERE id = %s",
        (long_id,),
    ).fetchone()
    assert row == (True, True, True)
