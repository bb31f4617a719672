"""The relation types are defined once, in ``loader.graph.relations``; the SQL that lists them
again (the CHECK of ``kb.document_relations``, landed in a migration that cannot change, and
``kb.explore_graph``) must agree with it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from loader.graph.relations import RELATION_TYPES

EXPLORE_GRAPH = Path(__file__).resolve().parents[2] / "sql_functions" / "explore_graph.sql"


def _valid_types(function_source: str) -> list[str]:
    """The ``valid_types`` array of kb.explore_graph's body."""
    found = re.search(
        r"valid_types\s+constant\s+text\[\]\s*:=\s*ARRAY\[(.*?)\]", function_source, re.S
    )
    assert found, "kb.explore_graph declares no valid_types array"
    return re.findall(r"'([^']*)'", found.group(1))


def test_explore_graph_sql_file_lists_the_relation_types() -> None:
    assert _valid_types(EXPLORE_GRAPH.read_text(encoding="utf-8")) == list(RELATION_TYPES)


def test_migrated_database_agrees_with_the_relation_types(conn: psycopg.Connection[Any]) -> None:
    checks = [
        row[0]
        for row in conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'kb.document_relations'::regclass AND contype = 'c'"
            " AND pg_get_constraintdef(oid) LIKE '%relation_type%'"
        )
    ]
    assert len(checks) == 1, checks
    assert re.findall(r"'([^']*)'::text", checks[0]) == list(RELATION_TYPES)
    deployed = conn.execute("SELECT pg_get_functiondef('kb.explore_graph'::regproc)").fetchone()
    assert deployed is not None
    assert _valid_types(deployed[0]) == list(RELATION_TYPES)
