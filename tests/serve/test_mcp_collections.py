"""``pgkb mcp`` over stdio, started as a process the way an agent's configuration starts it
(``"command": "pgkb", "args": ["mcp", "--collection", "hr"]``), against the knowledge base of
two collections (``tests/processes.py``), driven by the official SDK's client.

Checked: ``--collection hr`` keeps every tool to hr (the same ``readme.md`` resolves to hr's, the
catalogue, searches, walks and reads by id give nothing of eng) and a call asking for eng is a
tool error; ``PGKB_COLLECTIONS=hr,eng`` serves both and a call's ``collections`` narrows to one;
a role granted only hr, with no ``--collection``, is refused eng by the database with the message
a missing collection gets.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from tests.processes import ENG_MARKERS, ENG_TITLES, HR_TITLES, CollKb, pgkb


def _run(kb: CollKb, url: str, args: list[str], session: Callable[[Any], Awaitable[None]],
         **env: str) -> None:  # fmt: skip
    """``pgkb mcp ARGS`` as a process over stdio, as ``url``'s role; ``session(client)``."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    command = pgkb("mcp", *args)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=kb.env(url, **env), cwd=str(kb.home)
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            await session(client)

    anyio.run(main)


def _ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


def _error(result: Any) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


def _no_eng(data: dict[str, Any]) -> None:
    text = json.dumps({k: v for k, v in data.items() if k not in ("query", "question")})
    for marker in ENG_MARKERS:
        assert marker not in text, (marker, text[:800])


def test_mcp_with_collection_keeps_every_tool_to_it(coll_kb: CollKb) -> None:
    ids = coll_kb.ids()
    eng_ids = [ids[("eng", "createindex.md")], ids[("eng", "readme.md")]]

    async def session(client: Any) -> None:
        catalogue = _ok(await client.call_tool("list_documents", {}))
        assert {d["title"] for d in catalogue["documents"]} == HR_TITLES
        read = _ok(await client.call_tool("read_document", {"document": "readme.md"}))
        assert read["title"] == "HR readme"
        found = _ok(
            await client.call_tool("search", {"query": "readme", "mode": "keyword", "limit": 10})
        )
        assert {r["title"] for r in found["results"]} == {"HR readme"}
        for args in (
            {"query": "zanzibarite quokka-flux index", "limit": 50},
            {"query": "readme policy", "document_ids": eng_ids},
        ):
            data = _ok(await client.call_tool("search", args))
            assert {r["title"] for r in data["results"]} <= HR_TITLES, data
            _no_eng(data)
        assert (
            _ok(await client.call_tool("search", {"query": "x", "document_ids": eng_ids}))[
                "results"
            ]
            == []
        )
        walk = _ok(await client.call_tool("explore_graph", {"query": "zanzibarite"}))
        assert walk["documents"] == [], walk
        for doc in eng_ids:
            assert "no document" in _error(
                await client.call_tool("read_document", {"document": doc})
            )
        refused = _error(
            await client.call_tool("search", {"query": "readme", "collections": ["eng"]})
        )
        assert "this server serves collections hr; eng is not available" in refused, refused
        answer = _ok(await client.call_tool("ask", {"question": "How long is parental leave?"}))
        cited = {c["title"] for c in answer["citations"]}
        assert "Parental leave" in cited and cited <= HR_TITLES, answer

    _run(coll_kb, coll_kb.role_url(coll_kb.reader), ["--collection", "hr"], session)


def test_mcp_with_pgkb_collections_and_a_calls_collections(coll_kb: CollKb) -> None:
    async def session(client: Any) -> None:
        catalogue = _ok(await client.call_tool("list_documents", {}))
        assert {d["title"] for d in catalogue["documents"]} == HR_TITLES | ENG_TITLES
        eng = _ok(await client.call_tool("list_documents", {"collections": ["eng"]}))
        assert {d["title"] for d in eng["documents"]} == ENG_TITLES
        read = _ok(
            await client.call_tool(
                "read_document", {"document": "readme.md", "collections": ["eng"]}
            )
        )
        assert read["title"] == "Engineering readme"
        found = _ok(
            await client.call_tool(
                "search", {"query": "readme", "mode": "keyword", "collections": ["hr"]}
            )
        )
        assert {r["title"] for r in found["results"]} == {"HR readme"}
        refused = _error(await client.call_tool("list_documents", {"collections": ["default"]}))
        assert "default is not available" in refused, refused

    _run(coll_kb, coll_kb.role_url(coll_kb.reader), [], session, PGKB_COLLECTIONS="hr,eng")


def test_mcp_as_a_role_granted_one_collection(coll_kb: CollKb) -> None:
    async def session(client: Any) -> None:
        catalogue = _ok(await client.call_tool("list_documents", {}))
        assert {d["title"] for d in catalogue["documents"]} == HR_TITLES
        assert "no document" in _error(
            await client.call_tool("read_document", {"document": "createindex.md"})
        )
        messages = []
        for name in ("eng", "no_such_collection"):
            text = _error(
                await client.call_tool("search", {"query": "readme", "collections": [name]})
            )
            messages.append(text.replace(name, "X"))
        assert messages[0] == messages[1] and "may read" in messages[0], messages

    _run(coll_kb, coll_kb.role_url(coll_kb.hr_reader), [], session)
