"""Every CLI command works for the roles ``pgkb db grant`` makes, and anything else ends in one
``Error:`` line naming the missing grant, never a traceback.

A ``--read`` role (kb_reader: no table privilege) runs search in every mode, ask, docs list,
docs show, graph and stats; a ``--write`` role runs what its README row says (ingest, stats,
stale, remove) and is told which grant a search needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from loader.cli import cli
from tests.helpers import skip_without_pg_textsearch, use_pg_textsearch
from tests.serve_fixtures import ServeKb

pytestmark = pytest.mark.model

FURNITURE = "Who covers the cost of furniture for my home workspace?"


def run(kb: ServeKb, url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=kb.env(url), catch_exceptions=False)


def _one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return result.stderr


@pytest.fixture(params=["sql", "pg_textsearch"])
def backend(request: pytest.FixtureRequest, serve_kb: ServeKb) -> Iterator[str]:
    """The shared knowledge base with either keyword backend: pg_textsearch's extension and
    indexes created for the test and dropped after it (the other tests keep the SQL BM25)."""
    if request.param == "sql":
        yield "sql"
        return
    skip_without_pg_textsearch(serve_kb.pg_url)
    with psycopg.connect(serve_kb.url) as conn:
        use_pg_textsearch(conn)
    try:
        yield "pg_textsearch"
    finally:
        with psycopg.connect(serve_kb.url) as conn:
            conn.execute("DROP EXTENSION pg_textsearch CASCADE")


def test_a_reader_runs_every_read_command(serve_kb: ServeKb, backend: str) -> None:
    url = serve_kb.reader_url
    hits = json.loads(run(serve_kb, url, "search", FURNITURE, "--json").stdout)
    assert hits[0]["source_uri"].endswith("equipment.md")
    for mode in ("vector", "keyword"):
        result = run(serve_kb, url, "search", "CREATE INDEX CONCURRENTLY", "--mode", mode, "--json")
        assert result.exit_code == 0, result.output
        top = json.loads(result.stdout)[0]
        assert top["source_uri"].endswith("createindex.md") and top["category"] == "engineering"
        assert top["token_count"] > 0
    answer = run(serve_kb, url, "ask", FURNITURE, "--json")
    assert answer.exit_code == 0, answer.output
    assert json.loads(answer.stdout)["citations"][0]["source_uri"].endswith("equipment.md")
    # the abstention gate reads the corpus through definer functions: the owner's verdicts
    for question in ("What does the Zorblax policy say about hotels?", "Is there a bike scheme?"):
        as_reader = json.loads(run(serve_kb, url, "ask", question, "--json").stdout)
        as_owner = json.loads(run(serve_kb, serve_kb.url, "ask", question, "--json").stdout)
        assert as_reader == as_owner
    zorblax = json.loads(
        run(serve_kb, url, "ask", "What does the Zorblax policy say?", "--json").stdout
    )
    assert zorblax["abstained"] and "Zorblax" in zorblax["abstention"]["reason"], zorblax
    listed = run(serve_kb, url, "docs", "list", "--category", "handbook", "--json")
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == 3
    shown = run(serve_kb, url, "docs", "show", "handbook/leave.md", "--json")
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)
    assert info["title"] == "Parental leave"
    assert [e["source_uri"] for e in info["edges_out"]] == ["handbook/equipment.md"]
    assert run(serve_kb, url, "docs", "show", "leave.md").exit_code == 0
    graph = run(serve_kb, url, "docs", "graph", "leave.md", "--format", "json")
    assert graph.exit_code == 0, graph.output
    assert any(n["source_uri"].endswith("equipment.md") for n in json.loads(graph.stdout))
    stats = run(serve_kb, url, "stats", "--json")
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["documents"] == 5
    # no table privilege: db status counts through kb.stats, as the owner's figures
    status = run(serve_kb, url, "db", "status", "--json")
    assert status.exit_code == 0, status.output
    as_reader, as_owner = (
        json.loads(status.stdout),
        json.loads(run(serve_kb, serve_kb.url, "db", "status", "--json").stdout),
    )
    for key in ("documents", "chunks", "embeddings", "active_model", "schema_revision"):
        assert as_reader[key] == as_owner[key], key
    assert as_reader["documents"] == 5 and as_reader["access"].startswith("read")
    # the backend under test served the reader's searches
    assert as_reader["keyword_backend"].startswith(f"{backend} ("), as_reader


def test_a_reader_is_told_which_grant_the_rest_needs(
    serve_kb: ServeKb,
    tmp_path: Path,
) -> None:
    url = serve_kb.reader_url
    (tmp_path / "new.md").write_text("# New\n\nA new page.\n")
    for args in (
        ("ingest", str(tmp_path)),
        ("docs", "remove", "handbook/travel.md", "--yes"),
        ("docs", "stale", "--older-than", "1 day"),
    ):
        message = _one_error_line(run(serve_kb, url, *args))
        assert "permission denied" in message, args
        assert f"pgkb db grant {serve_kb.reader} --write" in message, message


def test_a_writer_loads_and_is_told_a_search_needs_read(
    serve_kb: ServeKb,
) -> None:
    url = serve_kb.writer_url
    stats = run(serve_kb, url, "stats", "--json")
    assert stats.exit_code == 0, stats.output
    stale = run(serve_kb, url, "docs", "stale", "--older-than", "1 day")
    assert stale.exit_code == 0, stale.output
    for mode in ("keyword", "hybrid"):
        message = _one_error_line(run(serve_kb, url, "search", "vacuum", "--mode", mode))
        assert "permission denied for function" in message
        assert f"pgkb db grant {serve_kb.writer} --read" in message, message
