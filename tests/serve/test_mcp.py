"""``pgkb mcp`` driven by the official SDK's client, as an agent would: a subprocess over stdio
running as a ``pgkb db grant --read`` role, and a streamable HTTP server with two clients at once.

Checked: the six tools are listed with descriptions and input/output schemas; each answers with
titles, source_uris and ids; bad arguments are tool errors and the server keeps serving; a
server scoped to a category never shows another category's documents; the database going away
mid-session is reported as a tool error and the next calls recover.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from tests.serve_fixtures import ServeKb

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"search", "ask", "read_document", "neighbor_chunks", "explore_graph", "list_documents"}
FURNITURE = "Who covers the cost of furniture for my home workspace?"


def _env(kb: ServeKb, url: str) -> dict[str, str]:
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "XDG_CONFIG_HOME": os.environ.get("XDG_CONFIG_HOME", ""),
        "HOME": os.environ.get("HOME", ""),
        **kb.env(url),
    }
    return env


def _command(*args: str) -> list[str]:
    return ["-c", "from loader.cli import main; main()", "mcp", *args]


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


def _error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _call(client: Any, name: str, args: dict[str, Any]) -> Any:
    return await client.call_tool(name, args)


def test_stdio_as_a_reader_role_every_tool_bad_arguments_and_an_outage(
    serve_kb: ServeKb,
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=_command("--timeout", "2"),
        env=_env(serve_kb, serve_kb.reader_url),
        cwd=str(ROOT),
    )

    async def session() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            listed = (await client.list_tools()).tools
            assert {t.name for t in listed} == TOOLS
            for tool in listed:
                assert tool.description and len(tool.description) > 40, tool.name
                assert tool.input_schema["type"] == "object"
                assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
            search_schema = next(t for t in listed if t.name == "search").input_schema
            assert search_schema["required"] == ["query"]
            assert search_schema["properties"]["limit"]["maximum"] == 50

            # search: the handbook's equipment page first, with what an agent cites
            found = _structured(await _call(client, "search", {"query": FURNITURE}))
            top = found["results"][0]
            assert top["source_uri"].endswith("equipment.md"), found
            assert top["title"] == "Home office equipment budget"
            assert top["chunk_id"] > 0 and top["document_id"]
            keyword = _structured(
                await _call(client, "search", {"query": "CONCURRENTLY", "mode": "keyword"})
            )
            assert keyword["results"][0]["source_uri"].endswith("createindex.md")
            vector = _structured(
                await _call(client, "search", {"query": "building an index", "mode": "vector"})
            )
            assert vector["results"] and vector["results"][0]["vector_similarity"] is not None

            # ask: no chat model configured, so the cited passages
            answer = _structured(await _call(client, "ask", {"question": FURNITURE}))
            assert not answer["abstained"], answer
            assert answer["citations"][0]["source_uri"].endswith("equipment.md")

            # read_document by the end of its source, then a chunk range by id
            read = _structured(await _call(client, "read_document", {"document": "createindex.md"}))
            assert read["status"] == "chunks" and read["title"] == "CREATE INDEX"
            assert "CONCURRENTLY" in " ".join(c["content"] for c in read["chunks"])
            assert all(c["chunk_id"] for c in read["chunks"])
            ranged = _structured(
                await _call(
                    client,
                    "read_document",
                    {"document": read["document_id"], "chunk_start": 0, "chunk_end": 0},
                )
            )
            assert [c["chunk_index"] for c in ranged["chunks"]] == [0]

            # neighbor_chunks around a hit
            around = _structured(
                await _call(client, "neighbor_chunks", {"chunk_id": top["chunk_id"], "after": 2})
            )
            assert around["source_uri"] == top["source_uri"]
            assert [c["is_hit"] for c in around["chunks"]].count(True) == 1

            # explore_graph from the leave page: its link to the equipment page
            graph = _structured(
                await _call(client, "explore_graph", {"document": "handbook/leave.md"})
            )
            assert any(d["source_uri"].endswith("equipment.md") for d in graph["documents"])

            # list_documents: the catalogue of both categories
            catalogue = _structured(await _call(client, "list_documents", {}))
            assert catalogue["count"] == 5 and not catalogue["truncated"]
            assert {d["category"] for d in catalogue["documents"]} == {"handbook", "engineering"}

            # bad arguments: tool errors, and the server keeps answering
            for name, args, says in (
                ("search", {}, "query"),
                ("search", {"query": "x", "limit": 500}, "limit"),
                ("search", {"query": "x", "mode": "fuzzy"}, "mode"),
                ("search", {"query": "   "}, "non-empty"),
                ("search", {"query": "x", "document_ids": ["nope"]}, "not a UUID"),
                ("read_document", {"document": "no-such-page.html"}, "no document"),
                ("read_document", {"document": "vacuum.md", "chunk_start": 9}, "past the end"),
                ("neighbor_chunks", {"chunk_id": 0}, "chunk_id"),
                ("neighbor_chunks", {"chunk_id": 10**12}, "no chunk"),
                ("explore_graph", {"document": "vacuum.md", "query": "x"}, "not both"),
                ("explore_graph", {"relation_types": ["likes"]}, "unknown relation type"),
                ("list_documents", {"limit": "many"}, "limit"),
                ("nope", {}, "nope"),
            ):
                result = await _call(client, name, args)
                assert says in _error_text(result), (name, args)
            # filters that match nothing are an empty result, not an error: the metadata filter
            # empties a search the source pattern alone answers, and a metadata value that
            # holds keeps its document only
            anywhere = {"query": FURNITURE, "source": "%"}
            assert _structured(await _call(client, "search", anywhere))["results"]
            nothing = _structured(await _call(client, "search", {**anywhere, "metadata": {"a": 1}}))
            assert nothing["results"] == [], nothing
            only = _structured(
                await _call(client, "search", {**anywhere, "metadata": {"file_name": "travel.md"}})
            )
            assert {r["source_uri"] for r in only["results"]} == {"handbook/travel.md"}, only
            assert _structured(await _call(client, "list_documents", {"limit": 1}))["truncated"]

            # the database goes away mid-session: reported, then recovered
            with psycopg.connect(serve_kb.pg_url, autocommit=True) as admin:
                db = sql.Identifier(serve_kb.dbname)
                admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(db))
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (serve_kb.dbname,),
                )
                try:
                    down = await _call(client, "search", {"query": FURNITURE})
                    assert "database" in _error_text(down)
                finally:
                    admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(db))
            deadline = time.monotonic() + 60
            while True:
                again = await _call(client, "search", {"query": FURNITURE})
                if not again.is_error or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.5)
            assert _structured(again)["results"][0]["source_uri"].endswith("equipment.md")

    anyio.run(session)


def test_a_server_scoped_to_a_category_never_shows_another(
    serve_kb: ServeKb,
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    with psycopg.connect(serve_kb.url) as conn:
        vacuum_id = str(
            conn.execute(
                "SELECT id FROM kb.documents WHERE source_uri LIKE %s", ("%vacuum.md",)
            ).fetchone()[0]  # type: ignore[index]
        )
        vacuum_chunk = conn.execute(
            "SELECT c.id FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
            "WHERE d.id = %s LIMIT 1",
            (vacuum_id,),
        ).fetchone()[0]  # type: ignore[index]
    params = StdioServerParameters(
        command=sys.executable,
        args=_command("--category", "handbook"),
        env=_env(serve_kb, serve_kb.reader_url),
        cwd=str(ROOT),
    )

    async def session() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            found = _structured(
                await _call(client, "search", {"query": "CREATE INDEX CONCURRENTLY", "limit": 50})
            )
            assert found["results"], found
            assert {r["category"] for r in found["results"]} == {"handbook"}
            keyword = _structured(
                await _call(client, "search", {"query": "vacuum", "mode": "keyword"})
            )
            assert keyword["results"] == []
            catalogue = _structured(await _call(client, "list_documents", {}))
            assert {d["category"] for d in catalogue["documents"]} == {"handbook"}
            answer = _structured(await _call(client, "ask", {"question": "What does VACUUM do?"}))
            cited = [c["source_uri"] for c in answer["citations"]]
            cited += [d["source_uri"] for d in answer["related_documents"]]
            assert not any("engineering" in uri for uri in cited), answer
            for name, args in (
                ("read_document", {"document": vacuum_id}),
                ("read_document", {"document": "vacuum.md"}),
                ("neighbor_chunks", {"chunk_id": vacuum_chunk}),
                ("explore_graph", {"document": vacuum_id}),
                ("search", {"query": "vacuum", "category": "engineering"}),
                ("search", {"query": "vacuum", "document_ids": [vacuum_id]}),
            ):
                result = await _call(client, name, args)
                if name == "search" and "document_ids" in args:
                    assert _structured(result)["results"] == []
                    continue
                text = _error_text(result)
                assert "no document" in text or "no chunk" in text or "scoped" in text, text
            # "cost" is in a page of each category: the walk finds the handbook's only
            graph = _structured(await _call(client, "explore_graph", {"query": "cost"}))
            found_uris = {d["source_uri"] for d in graph["documents"]}
            assert "handbook/equipment.md" in found_uris, graph
            assert all(uri.startswith("handbook/") for uri in found_uris), graph

    anyio.run(session)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_streamable_http_serves_two_clients_at_once(serve_kb: ServeKb) -> None:
    from mcp import Client

    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, *_command("--http", "--port", str(port))],
        env={**os.environ, **_env(serve_kb, serve_kb.reader_url)},
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "pgkb mcp --http did not start"
                time.sleep(0.3)
        url = f"http://127.0.0.1:{port}/mcp"
        results: dict[str, list[str]] = {}

        async def agent(name: str, question: str) -> None:
            async with Client(url, read_timeout_seconds=120) as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                uris = []
                for _ in range(5):
                    found = _structured(await client.call_tool("search", {"query": question}))
                    uris.append(found["results"][0]["source_uri"])
                results[name] = uris

        async def both() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(agent, "a", FURNITURE)
                group.start_soon(agent, "b", "How do I build an index without locking writes?")

        anyio.run(both)
        assert all(u.endswith("equipment.md") for u in results["a"]), results
        assert all(u.endswith("createindex.md") for u in results["b"]), results
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
    assert process.returncode in (0, -15), process.returncode


def _read_message(process: subprocess.Popen[bytes], seconds: float) -> dict[str, Any]:
    """The next JSON-RPC message the server writes (a line on stdout), within ``seconds``."""
    assert process.stdout is not None
    deadline = time.monotonic() + seconds
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no answer within {seconds} s (got {line!r})"
        ready, _, _ = select.select([process.stdout], [], [], left)
        if ready:
            piece = os.read(process.stdout.fileno(), 1)
            assert piece, f"the server closed stdout (exit {process.poll()})"
            line += piece
    message: dict[str, Any] = json.loads(line)
    return message


def test_stdio_answers_every_line_it_cannot_parse_with_a_json_rpc_error(
    serve_kb: ServeKb,
) -> None:
    """A client never waits forever: invalid JSON, params of the wrong type, a lone surrogate,
    a batch, a message without ``jsonrpc``: each gets a JSON-RPC error (with its id when it
    has a usable one), and the server goes on serving."""
    process = subprocess.Popen(
        [sys.executable, *_command()],
        env={**os.environ, **_env(serve_kb, serve_kb.reader_url)},
        cwd=str(ROOT),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None

    def send(line: str) -> None:
        assert process.stdin is not None
        process.stdin.write(line.encode("utf-8") + b"\n")
        process.stdin.flush()

    try:
        send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "1"},
                    },
                }
            )
        )
        assert _read_message(process, 180)["id"] == 0
        send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        search = '{"name": "search", "arguments": {"query": "\\ud800 furniture"}}'
        for line, ident, code, says in (
            ("{not json", None, -32700, "not JSON"),
            ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "oops"}', 2,
             -32600, "params"),
            ('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ' + search + "}", 3,
             -32602, "params.arguments.query holds a lone surrogate"),
            ('{"jsonrpc": "2.0", "id": "4", "method": "tools/list", "params": []}', "4",
             -32600, "params"),
            ('[{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}]', None, -32600, "batch"),
            ('{"id": 6, "method": "tools/list"}', 6, -32600, "jsonrpc"),
            ('{"jsonrpc": "2.0", "id": 7, "method": 7}', 7, -32600, "method"),
            ('"just a string"', None, -32600, "object"),
            # an id of the wrong type made the SDK read a notification and answer nothing
            ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', None, -32600, "id"),
            ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', None, -32600, "id"),
            ('{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', None, -32600, "id"),
            ('{"jsonrpc": "2.0", "id": [9], "method": "tools/call", "params": ' + search + "}",
             None, -32600, "id"),
        ):  # fmt: skip
            send(line)
            answer = _read_message(process, 60)
            assert answer.get("id") == ident and "error" in answer, (line, answer)
            assert answer["error"]["code"] == code, (line, answer)
            assert says in answer["error"]["message"], (line, answer)
            assert "http" not in answer["error"]["message"], answer
        # the session goes on
        send('{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}')
        listed = _read_message(process, 60)
        assert listed["id"] == 8 and {t["name"] for t in listed["result"]["tools"]} == TOOLS
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == 0  # stdin closed: the server ended cleanly


def test_tool_errors_speak_to_the_agent(serve_kb: ServeKb) -> None:
    """No pydantic text ending in a URL; hints name the tools, not the command line; unknown
    arguments are refused (as the HTTP API refuses unknown fields); explore_graph notes only
    what it was given; every parameter of every tool is described."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=_command(),
        env=_env(serve_kb, serve_kb.reader_url),
        cwd=str(ROOT),
    )

    async def session() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            for tool in (await client.list_tools()).tools:
                for name, schema in tool.input_schema["properties"].items():
                    assert schema.get("description"), f"{tool.name}.{name} has no description"
            for name, args, says in (
                ("search", {"query": "x", "limit": "many"}, "limit: "),
                ("search", {"query": "x", "mode": "fuzzy"}, "mode: "),
                ("search", {"limit": 3}, "query: "),
                ("neighbor_chunks", {"chunk_id": -1}, "chunk_id: "),
                ("read_document", {"document": "x", "max_tokens": 10}, "max_tokens: "),
            ):
                text = _error_text(await _call(client, name, args))
                assert says in text, (name, text)
                assert "http" not in text and "pydantic" not in text, text
                assert "validation error for" not in text, text
            missing = _error_text(await _call(client, "read_document", {"document": "nope.md"}))
            assert "list_documents" in missing and "pgkb " not in missing, missing
            # a collection the role may not read (or that does not exist): the hint names the
            # collections the agent may ask for, not command lines it cannot run
            for name, args in (
                ("search", {"query": "x", "collections": ["secret"]}),
                ("ask", {"question": "x", "collections": ["secret"]}),
                ("list_documents", {"collections": ["secret"]}),
            ):
                text = _error_text(await _call(client, name, args))
                assert "no collection 'secret'" in text, text
                assert "pgkb " not in text and "leave collections out" in text, text
            for name, args, extra in (
                ("search", {"query": "vacuum", "colour": "red"}, "colour"),
                ("list_documents", {"limit": 5, "Limit": 6}, "Limit"),
                ("explore_graph", {"query": "vacuum", "depht": 2}, "depht"),
            ):
                text = _error_text(await _call(client, name, args))
                assert f"unknown argument(s): {extra}" in text, text
                assert "accepted:" in text, text
            graph = _structured(await _call(client, "explore_graph", {"query": "vacuum"}))
            assert not any("depth" in note for note in graph["notes"]), graph["notes"]
            deep = _structured(
                await _call(client, "explore_graph", {"query": "vacuum", "depth": 2})
            )
            assert any("depth" in note for note in deep["notes"]), deep["notes"]

    anyio.run(session)
