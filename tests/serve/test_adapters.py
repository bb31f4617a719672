"""One request, every adapter, the same rows: the application core behind them all.

A search (hybrid, three results, one category) is sent as each adapter takes it: to the core
itself (:class:`loader.app.KnowledgeBase`), ``pgkb search --json``, ``POST /v1/search``, the MCP
``search`` tool, the web interface's search page, and the LangChain and LlamaIndex retrievers
(on the database and through ``pgkb serve``). Every one must give the same chunks in the same
order with the same scores, and refuse the same bad request (a limit over 50) with the core's
message.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve_fixtures import ServeKb, running, serve_kb  # noqa: F401  (fixture)

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "adapters-token"
QUERY = "Who covers the cost of furniture for my home workspace?"
OPTIONS: dict[str, Any] = {"mode": "hybrid", "limit": 3, "category": "handbook"}

Row = tuple[str, int, float]
"""(document id, chunk index, score to 6 digits)."""


def _row(hit: dict[str, Any], digits: int = 6) -> Row:
    return (str(hit["document_id"]), int(hit["chunk_index"]), round(float(hit["score"]), digits))


@pytest.fixture(scope="module")
def served(serve_kb: ServeKb) -> Iterator[tuple[str, Any]]:  # noqa: F811
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(serve_kb.as_reader(), pool_size=2).open()
    with running(create_app(service, token=TOKEN)) as url:
        yield url, service


def _core(kb: ServeKb) -> list[Row]:
    from loader.app import KnowledgeBase, SearchRequest

    result = KnowledgeBase(kb.as_reader()).search(SearchRequest.of(QUERY, **OPTIONS))
    return [_row(hit.to_dict()) for hit in result.hits]


def _cli(kb: ServeKb, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        **kb.env(kb.reader_url),
    }
    command = [sys.executable, "-c", "from loader.cli import main; main()", "search", "--json"]
    return subprocess.run(
        [*command, "--mode", "hybrid", "--category", "handbook", *extra, QUERY],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _http(url: str, **options: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/search",
        json={"query": QUERY, **options},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )


def _mcp(service: Any, **options: Any) -> Any:
    from mcp import Client

    from loader.serve.mcp import build_server

    async def call() -> Any:
        async with Client(build_server(service)) as client:
            return await client.call_tool("search", {"query": QUERY, **options})

    return asyncio.run(call())


def _web(service: Any) -> list[Row]:
    """The search page's results (a server without a token: no sign-in to go through)."""
    from loader.serve.http import create_app

    with running(create_app(service, close_service=False)) as url:
        page = httpx.get(f"{url}/search", params={"q": QUERY, **OPTIONS}, timeout=60)
    assert page.status_code == 200, page.text[:300]
    found = re.findall(
        r'href="/documents/([0-9a-f-]{36})\?chunk=(\d+)#chunk-\d+">.*?score ([0-9.]+)</span>',
        page.text,
        flags=re.S,
    )
    return [(doc, int(chunk), round(float(score), 4)) for doc, chunk, score in found]


def test_one_search_request_gives_the_same_rows_through_every_adapter(
    serve_kb: ServeKb,  # noqa: F811
    served: tuple[str, Any],
) -> None:
    from loader.integrations.langchain import PgkbRetriever as LangChainRetriever
    from loader.integrations.llamaindex import PgkbRetriever as LlamaIndexRetriever

    url, service = served
    expected = _core(serve_kb)
    assert len(expected) == 3 and len({r[0] for r in expected}) >= 1

    cli = _cli(serve_kb, "--limit", "3")
    assert cli.returncode == 0, cli.stderr
    assert [_row(h) for h in json.loads(cli.stdout)] == expected

    response = _http(url, **OPTIONS)
    assert response.status_code == 200, response.text
    assert [_row(h) for h in response.json()["results"]] == expected

    tool = _mcp(service, **OPTIONS)
    assert not tool.is_error, tool.content
    assert [_row(h) for h in tool.structured_content["results"]] == expected

    assert _web(service) == [(doc, chunk, round(score, 4)) for doc, chunk, score in expected]

    for place in ({"database_url": serve_kb.reader_url}, {"serve_url": url, "token": TOKEN}):
        docs = LangChainRetriever(**place, settings=serve_kb.as_reader(), **OPTIONS).invoke(QUERY)
        rows = [_row(d.metadata) for d in docs]
        assert rows == expected, place
        nodes = LlamaIndexRetriever(**place, settings=serve_kb.as_reader(), **OPTIONS).retrieve(
            QUERY
        )
        assert [_row(n.node.metadata) for n in nodes] == expected, place


def test_one_bad_request_is_refused_alike_by_every_adapter(
    serve_kb: ServeKb,  # noqa: F811
    served: tuple[str, Any],
) -> None:
    """A limit over 50: the core's message, in each adapter's own way of refusing."""
    from loader.app import BadRequest, KnowledgeBase, SearchRequest
    from loader.errors import ConfigError
    from loader.integrations.langchain import PgkbRetriever as LangChainRetriever

    url, service = served
    message = "limit must be from 1 to 50, got 51"
    with pytest.raises(BadRequest, match=message):
        KnowledgeBase(serve_kb.as_reader()).search(SearchRequest.of(QUERY, limit=51))
    response = _http(url, limit=51)
    assert response.status_code == 400 and message in response.json()["error"]["message"]
    with pytest.raises(ConfigError, match=message):
        LangChainRetriever(database_url=serve_kb.reader_url, limit=51).invoke(QUERY)
    cli = _cli(serve_kb, "--limit", "51")
    assert cli.returncode == 2 and "51 is not in the range 1<=x<=50" in cli.stdout, cli.stdout
    tool = _mcp(service, limit=51)
    assert tool.is_error
