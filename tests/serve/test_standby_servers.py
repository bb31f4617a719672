"""``pgkb serve``, ``pgkb mcp`` and ``pgkb ask --agent`` reading from a hot standby, started as
processes the way the scaling guide configures them: ``PGKB_READ_DATABASE_URL`` names the
standby and ``PGKB_DATABASE_URL`` a primary nothing answers at, so every read can only have
gone to the standby (the session's primary and standby: ``tests/standby_fixtures.py``; the
real local model, which each process loads).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.fake_openai import FakeOpenAI, chat_reply, tool_call
from tests.processes import Served, pgkb, process_env, run_pgkb
from tests.standby_fixtures import StandbyKb

pytestmark = [pytest.mark.model, pytest.mark.slow]

REPLAY = "How does a standby replay the log?"


def _env(kb: StandbyKb, home: Path, **more: str) -> dict[str, str]:
    return process_env({**kb.env(), **more}, home)


def _names(results: list[dict[str, Any]]) -> list[str]:
    return [Path(r["source_uri"]).name for r in results]


def test_pgkb_serve_and_pgkb_mcp_read_from_the_standby(
    standby_kb: StandbyKb, tmp_path: Path
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = _env(standby_kb, tmp_path)
    # the HTTP server loads its model while the MCP session below runs
    served = Served(["--timeout", "5"], env, tmp_path / "serve", wait=False)
    try:
        command = pgkb("mcp", "--timeout", "5")
        params = StdioServerParameters(
            command=command[0], args=command[1:], env=env, cwd=str(tmp_path)
        )

        async def session() -> None:
            async with Client(params, read_timeout_seconds=180) as client:
                found = await client.call_tool("search", {"query": REPLAY})
                assert not found.is_error, found.content
                assert _names(found.structured_content["results"])[0] == "replication.md"
                listed = await client.call_tool("list_documents", {})
                assert not listed.is_error, listed.content
                assert sorted(_names(listed.structured_content["documents"])) == [
                    "failover.md", "replication.md", "vacuum.md",
                ]  # fmt: skip
                read = await client.call_tool("read_document", {"document": "failover.md"})
                assert not read.is_error, read.content
                assert "pg_ctl promote" in json.dumps(read.structured_content)

        anyio.run(session)

        served.wait_ready()
        health = served.get("/healthz")
        assert health.status_code == 200 and health.json()["database"] is True, health.text
        hits = served.post("/v1/search", json={"query": REPLAY})
        assert hits.status_code == 200, hits.text
        assert _names(hits.json()["results"])[0] == "replication.md"
        answer = served.post("/v1/ask", json={"question": "How is a standby promoted?"})
        assert answer.status_code == 200, answer.text
        assert "failover.md" in _names(answer.json()["citations"]), answer.text
        # its pool is on the standby
        with psycopg.connect(standby_kb.standby_admin, autocommit=True) as standby:
            row = standby.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgkb serve'"
            ).fetchone()
        assert row is not None and row[0] >= 1, row
    finally:
        served.stop()
    assert "Traceback" not in served.output(), served.output()


def test_the_reader_agent_reads_from_the_standby(
    standby_kb: StandbyKb, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(None, [tool_call("search_chunks", {"query": "pg_ctl promote"}, "s1")]),
        chat_reply("A standby is promoted with pg_ctl promote [Failover]."),
    )
    env = _env(
        standby_kb, tmp_path,
        PGKB_CHAT_BASE_URL=fake_openai.base_url, PGKB_CHAT_MODEL="fake-chat",
        PGKB_CHAT_MAX_RETRIES="0", PGKB_CHAT_TIMEOUT="30",
    )  # fmt: skip
    result = run_pgkb(["ask", "--agent", "--json", "How is a standby promoted?"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    first, second = fake_openai.requests_to("/v1/chat/completions")
    assert "replication.md" in first.body["messages"][1]["content"]  # the first search's hits
    (searched,) = [m["content"] for m in second.body["messages"] if m["role"] == "tool"]
    assert _names(json.loads(searched)["results"])[0] == "failover.md", searched
    assert answer["mode"] == "agent", answer
    assert [c["title"] for c in answer["citations"]] == ["Failover"], answer
