"""Quoted search text means exact terms: ``kb.keyword_search('"work_mem"')`` returns only chunks
that hold ``work_mem`` as written (not maintenance_work_mem, not "working days"), a quoted phrase
only chunks that hold the phrase, and ``pgkb search --mode keyword`` says why when a quoted part
cannot be matched or matches nothing. Unquoted text keeps the ranked, any-word behaviour."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from tests.helpers import load_chunks

pytestmark = pytest.mark.usefixtures("keyword_backend")  # both keyword backends

CHUNKS = [
    ("runtime-config-resource.html", "Resource Consumption > Memory",
     "work_mem (integer) sets the base maximum amount of memory to be used by a query operation "
     "before writing to temporary disk files."),
    ("runtime-config-resource.html", "Resource Consumption > Memory",
     "maintenance_work_mem (integer) specifies the maximum amount of memory to be used by "
     "maintenance operations."),
    ("calendar.html", "Dates", "Counting working days: the place of work decides the holidays."),
    ("memo.html", "Memos", "A memo about work and memory: mem is short for memory."),
    ("parallel.html", "Parallel Query", "Parallel query can use several workers per query."),
    ("planner.html", "Planner > Safety",
     "A query runs in parallel when the planner finds a parallel plan cheaper."),
    ("tuning.html", "Tuning", "Raise WORK_MEM for big sorts, then watch the temporary files."),
]  # fmt: skip


def _ids(conn: psycopg.Connection[Any], query: str) -> list[int]:
    rows = conn.execute("SELECT chunk_id FROM kb.keyword_search(%s, 20)", (query,)).fetchall()
    return [r[0] for r in rows]


def test_a_quoted_identifier_matches_it_as_written_only(conn: psycopg.Connection[Any]) -> None:
    ids = load_chunks(conn, CHUNKS)
    work_mem, maintenance, _days, _memo, _pq, _plan, upper = ids
    assert sorted(_ids(conn, '"work_mem"')) == sorted([work_mem, upper])
    # unquoted: the identifier's chunks first, then the chunks holding some of its words
    loose = _ids(conn, "work_mem")
    assert set(loose[:2]) == {work_mem, upper} and maintenance in loose and len(loose) > 3
    # a quoted identifier with other words: the words rank, the identifier is required
    assert set(_ids(conn, '"work_mem" temporary files sorts')) == {work_mem, upper}
    assert _ids(conn, '"maintenance_work_mem"') == [maintenance]
    assert _ids(conn, '"nosuch_setting" memory') == []


def test_a_quoted_phrase_matches_the_phrase_only(conn: psycopg.Connection[Any]) -> None:
    ids = load_chunks(conn, CHUNKS)
    _wm, _mwm, days, _memo, pq, plan, _upper = ids
    assert _ids(conn, '"working days"') == [days]
    assert set(_ids(conn, '"parallel query"')) == {pq}
    assert set(_ids(conn, '"parallel plan" query')) == {plan}
    # -word still drops, and a quoted phrase beside plain words is required, the words rank
    assert _ids(conn, '"parallel query" -workers') == []
    # unquoted: any of the words, the chunks holding both first
    loose = _ids(conn, "parallel query")
    assert set(loose[:2]) == {pq, plan} and len(loose) > 2


def test_the_command_says_why_quotes_found_nothing(
    conn: psycopg.Connection[Any], cli_env: dict[str, str]
) -> None:
    load_chunks(conn, CHUNKS)
    runner = CliRunner()
    found = runner.invoke(cli, ["search", '"work_mem"', "--mode", "keyword", "--json"],
                          env=cli_env)  # fmt: skip
    assert found.exit_code == 0, found.output
    hits = json.loads(found.stdout)
    assert len(hits) == 2
    assert all("work_mem" in h["content"].lower() and "maintenance_work_mem" not in h["content"]
               for h in hits)  # fmt: skip
    none = runner.invoke(cli, ["search", '"nosuch_setting"', "--mode", "keyword"], env=cli_env)
    assert none.exit_code == 0, none.output
    assert "no results" in none.stderr
    assert 'no chunk holds "nosuch_setting" as written' in none.stderr
    stop = runner.invoke(cli, ["search", '"to be or not to be"', "--mode", "keyword"], env=cli_env)
    assert stop.exit_code == 0, stop.output
    assert "only stop words" in stop.stderr and '"to be or not to be"' in stop.stderr
