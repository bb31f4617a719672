"""kb.explore_graph, the graph tables and kb.read_document's stored outline, on a hand-made graph.

The graph (edges source -> target, all ``references`` unless named):

    A -> B, B -> C, C -> A (a cycle), C -> D (supersedes), D -> E, F (category "other") -> A,
    G alone.

Categories: F is "other", the rest "docs". Ids are fixed so golden rows are exact.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from loader.errors import SqlState
from tests.helpers import raises_code

IDS = {name: f"00000000-0000-0000-0000-00000000000{i}" for i, name in enumerate("ABCDEFG", 1)}
NAME = {v: k for k, v in IDS.items()}


@pytest.fixture
def graph(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    for name, doc_id in IDS.items():
        conn.execute(
            "INSERT INTO kb.documents (id, source_uri, title, content_sha, category, doc_type,"
            " summary, key_entities) VALUES (%s, %s, %s, 'x', %s, %s, %s, %s)",
            (
                doc_id,
                f"/kb/{name.lower()}.html",
                f"Doc {name}",
                "other" if name == "F" else "docs",
                "manual" if name in "AB" else "reference",
                f"About {name}.",
                [name.lower()],
            ),
        )
    edges = [
        ("A", "B", "references"),
        ("B", "C", "references"),
        ("C", "A", "references"),
        ("C", "D", "supersedes"),
        ("D", "E", "references"),
        ("F", "A", "references"),
    ]
    for source, target, kind in edges:
        conn.execute(
            "INSERT INTO kb.document_relations (source_id, target_id, relation_type, origin,"
            " evidence) VALUES (%s, %s, %s, 'link', 'see')",
            (IDS[source], IDS[target], kind),
        )
    conn.commit()
    return conn


def explore(conn: psycopg.Connection[Any], **kwargs: Any) -> list[tuple[Any, ...]]:
    args = ", ".join(f"{k} => %({k})s" for k in kwargs)
    params = {k: json.dumps(v) if k == "filters" else v for k, v in kwargs.items()}
    rows = conn.execute(
        f"SELECT document_id::text, distance, path FROM kb.explore_graph({args})", params
    ).fetchall()
    conn.rollback()
    return [
        (
            NAME[r[0]],
            r[1],
            None if r[2] is None else [
                (NAME[e["source_id"]], NAME[e["target_id"]], e["relation_type"]) for e in r[2]
            ],
        )
        for r in rows
    ]  # fmt: skip


def test_depth_one_is_undirected_with_paths(graph: psycopg.Connection[Any]) -> None:
    assert explore(graph, start_document=IDS["A"], max_depth=1) == [
        ("A", 0, []),
        ("B", 1, [("A", "B", "references")]),
        ("C", 1, [("C", "A", "references")]),
        ("F", 1, [("F", "A", "references")]),
    ]


def test_depth_three_follows_the_cycle_once(graph: psycopg.Connection[Any]) -> None:
    assert explore(graph, start_document=IDS["A"], max_depth=3) == [
        ("A", 0, []),
        ("B", 1, [("A", "B", "references")]),
        ("C", 1, [("C", "A", "references")]),
        ("F", 1, [("F", "A", "references")]),
        ("D", 2, [("C", "A", "references"), ("C", "D", "supersedes")]),
        ("E", 3, [("C", "A", "references"), ("C", "D", "supersedes"), ("D", "E", "references")]),
    ]


def test_relation_types_limit_the_walk(graph: psycopg.Connection[Any]) -> None:
    assert explore(graph, start_document=IDS["C"], max_depth=3, relation_types=["supersedes"]) == [
        ("C", 0, []),
        ("D", 1, [("C", "D", "supersedes")]),
    ]


def test_filters_hide_documents_and_paths_through_them(graph: psycopg.Connection[Any]) -> None:
    rows = explore(graph, start_document=IDS["B"], max_depth=2, filters={"category": "docs"})
    assert [r[0] for r in rows] == ["B", "A", "C", "D"]  # F (other) is not reached
    assert explore(graph, start_document=IDS["F"], filters={"category": "docs"}) == []
    # document_ids: the walk stays inside the given set
    ids = [IDS["A"], IDS["B"], IDS["D"], IDS["E"]]
    assert [
        r[0] for r in explore(graph, start_document=IDS["A"], max_depth=3, document_ids=ids)
    ] == [
        "A",
        "B",
    ]
    rows = explore(graph, start_document=IDS["A"], filters={"source": "%/f.html"})
    assert rows == []


def test_catalogue_lists_documents_with_edges_among_them(graph: psycopg.Connection[Any]) -> None:
    rows = graph.execute(
        "SELECT document_id::text, title, doc_type, summary, distance, path, edges"
        " FROM kb.explore_graph(max_results => 3)"
    ).fetchall()
    # most connected: A (3 edges), C (3), B (2) / D (2): ties by title
    assert [NAME[r[0]] for r in rows] == ["A", "B", "C"]
    assert rows[0][1:6] == ("Doc A", "manual", "About A.", None, None)
    edges = {NAME[r[0]]: [(NAME[e["target_id"]], e["relation_type"]) for e in r[6]] for r in rows}
    assert edges == {
        "A": [("B", "references")],
        "B": [("C", "references")],
        "C": [("A", "references")],
    }
    scoped = graph.execute(
        'SELECT count(*) FROM kb.explore_graph(filters => \'{"category": "other"}\')'
    ).fetchone()
    assert scoped == (1,)


def test_query_mode_finds_matches_and_one_hop(graph: psycopg.Connection[Any]) -> None:
    graph.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count)"
        " VALUES (%s, 0, 'vacuum freezes old tuples', 's', 4)",
        (IDS["D"],),
    )
    graph.commit()
    assert explore(graph, query_text="vacuum") == [
        ("D", 0, []),
        ("C", 1, [("C", "D", "supersedes")]),
        ("E", 1, [("D", "E", "references")]),
    ]
    assert explore(graph, query_text="nothing matches this") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_depth": 0}, "max_depth must be between 1 and 3, got 0"),
        ({"max_depth": 4}, "max_depth must be between 1 and 3, got 4"),
        ({"max_depth": None}, "max_depth must be between 1 and 3, got NULL"),
        ({"relation_types": ["cites"]}, "unknown relation type 'cites'"),
        ({"relation_types": []}, "relation_types is empty"),
        ({"max_results": 0}, "max_results must be between 1 and 500"),
        ({"query_text": "x"}, "give start_document or query_text, not both"),
        ({"filters": {"colour": "red"}}, 'unknown filter key "colour"'),
    ],
)
def test_bad_arguments_are_refused(
    graph: psycopg.Connection[Any], kwargs: dict[str, Any], message: str
) -> None:
    with raises_code(SqlState.INVALID_ARGUMENT, match=message):
        explore(graph, start_document=IDS["A"], **kwargs)
    graph.rollback()


def test_results_are_bounded(graph: psycopg.Connection[Any]) -> None:
    rows = explore(graph, start_document=IDS["A"], max_depth=3, max_results=2)
    assert rows == [("A", 0, []), ("B", 1, [("A", "B", "references")])]


def test_kb_reader_may_explore_but_not_read_the_tables(graph: psycopg.Connection[Any]) -> None:
    graph.execute("SET ROLE kb_reader")
    rows = graph.execute(
        "SELECT count(*) FROM kb.explore_graph(%s, max_depth => 3,"
        ' filters => \'{"category": "docs"}\')',
        (IDS["A"],),
    ).fetchone()
    assert rows == (5,)  # A..E, never F
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        graph.execute("SELECT * FROM kb.document_relations")
    graph.rollback()


def test_function_is_stable_and_security_definer(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT provolatile, prosecdef FROM pg_proc WHERE oid = 'kb.explore_graph'::regproc"
    ).fetchone()
    assert row == ("s", True)


def test_table_constraints(graph: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        graph.execute(
            "INSERT INTO kb.document_relations (source_id, target_id, relation_type, origin)"
            " VALUES (%s, %s, 'references', 'link')",
            (IDS["A"], IDS["A"]),
        )
    graph.rollback()
    with pytest.raises(psycopg.errors.CheckViolation):
        graph.execute(
            "INSERT INTO kb.document_relations (source_id, target_id, relation_type, origin)"
            " VALUES (%s, %s, 'references', 'guess')",
            (IDS["A"], IDS["G"]),
        )
    graph.rollback()
    with pytest.raises(psycopg.errors.CheckViolation):
        graph.execute("UPDATE kb.documents SET doc_type = 'novel' WHERE id = %s", (IDS["A"],))
    graph.rollback()
    # deleting a document removes its edges at both ends
    graph.execute("DELETE FROM kb.documents WHERE id = %s", (IDS["C"],))
    left = graph.execute(
        "SELECT count(*) FROM kb.document_relations WHERE %s IN (source_id, target_id)",
        (IDS["C"],),
    ).fetchone()
    assert left == (0,)
    graph.rollback()


def test_read_document_outline_uses_the_stored_toc(conn: psycopg.Connection[Any]) -> None:
    doc = conn.execute(
        "INSERT INTO kb.documents (source_uri, title, content_sha, toc) VALUES ('/t.md', 'T', 'x',"
        " %s::jsonb) RETURNING id",
        (
            json.dumps(
                [
                    {"title": "Intro", "level": 1, "chunk_start": 0, "chunk_end": 1},
                    {"title": "Body", "level": 1, "chunk_start": 2, "chunk_end": 5},
                    {"title": "Detail", "level": 2, "chunk_start": 3, "chunk_end": 5},
                ]
            ),
        ),
    ).fetchone()
    assert doc is not None
    for i in range(6):
        conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha,"
            " token_count) VALUES (%s, %s, 'T', 'text', 's', 10)",
            (doc[0], i),
        )
    rows = conn.execute(
        "SELECT status, chunk_index, last_chunk_index, heading_path, token_count"
        " FROM kb.read_document(%s, token_budget => 5)",
        (doc[0],),
    ).fetchall()
    assert rows == [
        ("outline", 0, 1, "Intro", 20),
        ("outline", 2, 5, "Body", 40),
        ("outline", 3, 5, "  Detail", 30),
    ]
    rows = conn.execute(
        "SELECT chunk_index, last_chunk_index, heading_path FROM kb.read_document(%s, 1, 3, 5)",
        (doc[0],),
    ).fetchall()
    assert rows == [(1, 1, "Intro"), (2, 3, "Body"), (3, 3, "  Detail")]
    conn.execute("UPDATE kb.documents SET toc = '[]' WHERE id = %s", (doc[0],))
    rows = conn.execute(
        "SELECT chunk_index, last_chunk_index, heading_path"
        " FROM kb.read_document(%s, token_budget => 5)",
        (doc[0],),
    ).fetchall()
    assert rows == [(0, 5, "T")]  # no stored outline: runs of heading paths, as before
