"""Building an answer reads nothing: its related documents come from the graph neighbours the
retrieval step fetched (no connection is passed, none is opened)."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

from loader.answer.citations import check_citations
from loader.answer.passages import Passage
from loader.answer.result import abstained_answer, checked_answer, fallback_answer

A, B, C, D = (uuid.UUID(int=i) for i in range(1, 5))


def _passage(doc: uuid.UUID, title: str) -> Passage:
    return Passage(doc, title, f"{title.lower()}.md", 0, f"{title} text.")


RETRIEVED = [_passage(A, "Vacuum"), _passage(B, "Analyze")]
NEIGHBOURS = {
    A: [
        (C, "Autovacuum", "autovacuum.md", "supplements"),
        (B, "Analyze", "analyze.md", "references"),
    ],
    B: [(D, "Statistics", "statistics.md", "references")],
}


def test_result_module_reads_no_database() -> None:
    source = Path(__file__).resolve().parents[2] / "loader" / "answer" / "result.py"
    imported = {
        alias.name if isinstance(node, ast.Import) else (node.module or "")
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {name for name in imported if name.startswith(("psycopg", "loader.db"))}


def test_cited_documents_neighbours_follow_the_retrieved_ones() -> None:
    checked = check_citations("Run it [Vacuum].", RETRIEVED)
    answer = checked_answer(
        "how?", "Run it [Vacuum].", checked, RETRIEVED, RETRIEVED, neighbours=NEIGHBOURS, steps=1
    )
    assert [c.title for c in answer.citations] == ["Vacuum"]
    related = [(d.title, d.relation) for d in answer.related_documents]
    assert related == [("Analyze", "retrieved"), ("Autovacuum", "supplements")]


def test_without_citations_the_retrieved_documents_anchor_the_graph() -> None:
    answer = abstained_answer("why?", RETRIEVED, "weak", {}, neighbours=NEIGHBOURS)
    related = [(d.title, d.relation) for d in answer.related_documents]
    # neither retrieved document is cited: both are listed, then their neighbours, references first
    assert related == [
        ("Vacuum", "retrieved"),
        ("Analyze", "retrieved"),
        ("Statistics", "references"),
        ("Autovacuum", "supplements"),
    ]
    shown = fallback_answer("why?", RETRIEVED, mode="extractive", neighbours={})
    assert [d.title for d in shown.related_documents] == []  # both cited (shown), no neighbours
