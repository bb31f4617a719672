"""The functions the web interface reads: kb.document_page (filters, words, type, sort, pages,
stale flag, total, edge counts within the caller's collections), kb.document_facets,
kb.ingest_activity (and the failures kb.ingest_run_end keeps), on a real database."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from loader.errors import SqlState
from tests.helpers import raises_code


def _doc(
    conn: psycopg.Connection[Any],
    uri: str,
    title: str,
    *,
    collection: str = "default",
    category: str | None = None,
    doc_type: str = "general",
    age_days: int = 0,
) -> str:
    conn.execute(
        "INSERT INTO kb.collections (name) VALUES (%s) ON CONFLICT DO NOTHING", (collection,)
    )
    row = conn.execute(
        "INSERT INTO kb.documents (source_uri, title, content_sha, collection, category, doc_type,"
        " updated_at) VALUES (%s, %s, 'x', %s, %s, %s, now() - make_interval(days => %s))"
        " RETURNING id::text",
        (uri, title, collection, category, doc_type, age_days),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _page(conn: psycopg.Connection[Any], **args: Any) -> list[tuple[Any, ...]]:
    params = {
        "filters": "{}", "doc_type": None, "words": None, "sort": "title", "stale": None,
        "offset": 0, "size": 50, "ids": None,
    }  # fmt: skip
    params.update(args)
    return conn.execute(
        "SELECT title, collection, stale, total, edges_out, edges_in, chunk_count"
        "  FROM kb.document_page(%(filters)s::jsonb, %(doc_type)s, %(words)s, %(sort)s,"
        "                        %(stale)s::interval, %(offset)s, %(size)s, %(ids)s::uuid[])",
        params,
    ).fetchall()


@pytest.fixture
def corpus(conn: psycopg.Connection[Any]) -> dict[str, str]:
    ids = {
        "a": _doc(conn, "/kb/alpha.md", "Alpha policy", category="hr", doc_type="policy",
                  age_days=400),
        "b": _doc(conn, "/kb/beta.md", "Beta manual", category="hr", doc_type="manual"),
        "c": _doc(conn, "/kb/gamma-index.md", "Gamma", category="eng", age_days=10),
        "d": _doc(conn, "/eng/delta.md", "Delta notes", collection="eng"),
    }  # fmt: skip
    conn.execute(
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type) VALUES"
        " (%s, %s, 'references'), (%s, %s, 'supersedes'), (%s, %s, 'references')",
        (ids["a"], ids["b"], ids["a"], ids["c"], ids["d"], ids["a"]),
    )
    conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count)"
        " VALUES (%s, 0, 'x', 'x', 1), (%s, 1, 'y', 'y', 1)",
        (ids["a"], ids["a"]),
    )
    conn.commit()
    return ids


def test_pages_filters_sort_and_counts(
    conn: psycopg.Connection[Any], corpus: dict[str, str]
) -> None:
    rows = _page(conn)
    assert [r[0] for r in rows] == ["Alpha policy", "Beta manual", "Delta notes", "Gamma"]
    assert {r[3] for r in rows} == {4}
    alpha = rows[0]
    assert alpha[4:7] == (2, 1, 2)  # 2 out, 1 in (from delta), 2 chunks
    # pages: offset and size, the total on each page
    second = _page(conn, offset=2, size=2)
    assert [r[0] for r in second] == ["Delta notes", "Gamma"] and second[0][3] == 4
    assert _page(conn, offset=10) == []
    # words of the title or the source, case-insensitive, all of them
    assert [r[0] for r in _page(conn, words="  INDEX  gam ")] == ["Gamma"]
    assert [r[0] for r in _page(conn, words="policy alpha")] == ["Alpha policy"]
    assert _page(conn, words="alpha beta") == []
    # type, category, collection
    assert [r[0] for r in _page(conn, doc_type="manual")] == ["Beta manual"]
    assert [r[0] for r in _page(conn, filters=json.dumps({"category": "hr"}))] == [
        "Alpha policy",
        "Beta manual",
    ]
    assert [r[0] for r in _page(conn, filters='{"collections": ["eng"]}')] == ["Delta notes"]
    # newest first; stale when older than stale_after
    assert [r[0] for r in _page(conn, sort="updated")] == [
        "Beta manual",
        "Delta notes",
        "Gamma",
        "Alpha policy",
    ]
    stale = {r[0]: r[2] for r in _page(conn, stale="30 days")}
    assert stale == {"Alpha policy": True, "Beta manual": False, "Delta notes": False,
                     "Gamma": False}  # fmt: skip
    assert not any(r[2] for r in _page(conn))
    assert [r[0] for r in _page(conn, ids=[corpus["c"]])] == ["Gamma"]
    with raises_code(SqlState.INVALID_ARGUMENT, match="sort must be title or"):
        _page(conn, sort="size")


def test_a_reader_of_one_collection_sees_its_documents_and_their_edges_only(
    conn: psycopg.Connection[Any], corpus: dict[str, str]
) -> None:
    conn.execute("SELECT set_config('pgkb.collections', 'default', false)")
    rows = _page(conn)
    assert [r[0] for r in rows] == ["Alpha policy", "Beta manual", "Gamma"]
    assert rows[0][4:6] == (2, 0)  # the edge from the other collection's document is not counted
    facets = conn.execute("SELECT facet, value, documents FROM kb.document_facets()").fetchall()
    assert ("collection", "eng", 1) not in facets
    assert ("collection", "default", 3) in facets
    assert conn.execute("SELECT count(*) FROM kb.ingest_activity()").fetchone() == (0,)


def test_facets(conn: psycopg.Connection[Any], corpus: dict[str, str]) -> None:
    facets = conn.execute("SELECT facet, value, documents FROM kb.document_facets()").fetchall()
    assert facets == [
        ("category", "eng", 1), ("category", "hr", 2), ("category", None, 1),
        ("collection", "default", 3), ("collection", "eng", 1),
        ("doc_type", "general", 2), ("doc_type", "manual", 1), ("doc_type", "policy", 1),
    ]  # fmt: skip
    hr = conn.execute(
        'SELECT facet, value, documents FROM kb.document_facets(\'{"category": "hr"}\')'
    ).fetchall()
    assert ("collection", "default", 2) in hr and ("collection", "eng", 1) not in hr


def test_the_run_log_keeps_failed_sources(conn: psycopg.Connection[Any]) -> None:
    first = conn.execute("SELECT kb.ingest_run_begin(ARRAY['/docs'])").fetchone()
    assert first is not None
    failed = [{"source": f"/docs/{i}.pdf", "reason": "unreadable PDF"} for i in range(120)]
    failed[0]["reason"] = "x" * 5000
    report = {"new": 1, "failed": failed, "exit_code": 1}
    conn.execute("SELECT kb.ingest_run_end(%s, %s::jsonb)", (first[0], json.dumps(report)))
    second = conn.execute("SELECT kb.ingest_run_begin(ARRAY['/more'])").fetchone()
    assert second is not None
    conn.commit()
    rows = conn.execute(
        "SELECT run_id, running, docs_failed, failures FROM kb.ingest_activity(5)"
    ).fetchall()
    assert [r[0] for r in rows] == [second[0], first[0]]
    assert rows[0][1] is False  # unfinished, but no ingestion holds the lock: not running
    assert rows[1][2] == 120 and len(rows[1][3]) == 100
    assert rows[1][3][1] == {"source": "/docs/1.pdf", "reason": "unreadable PDF"}
    assert len(rows[1][3][0]["reason"]) == 1000
    # while an ingestion holds the lock, the newest unfinished run is running
    conn.execute("SELECT pg_advisory_lock(%s)", (0x70676B62_00000001,))
    running = conn.execute("SELECT run_id, running FROM kb.ingest_activity(5)").fetchall()
    assert running[0] == (second[0], True) and running[1][1] is False
    conn.execute("SELECT pg_advisory_unlock(%s)", (0x70676B62_00000001,))
    # a number instead of a list: the count, no failures
    conn.execute("SELECT kb.ingest_run_end(%s, '{\"failed\": 3}')", (second[0],))
    assert conn.execute("SELECT docs_failed, failures FROM kb.ingest_activity(1)").fetchone() == (
        3,
        [],
    )
