"""``GET /metrics`` on ``pgkb serve`` and ``pgkb mcp --http``, scraped after a bounded load:
requests and latency by route and mode, answers and abstentions, reranker fallbacks, pool
waits and the model's load time, in Prometheus' text format (parsed by prometheus-client's own
parser); behind the token like the API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from tests.fake_openai import FakeOpenAI, Reply
from tests.serve_fixtures import ServeKb, running, serve_kb  # noqa: F401  (fixture)

pytestmark = pytest.mark.model

TOKEN = "metrics-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FURNITURE = "Who covers the cost of furniture for my home workspace?"
UNKNOWN = "How do I list the jobs the pg_cron extension has scheduled?"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def server(serve_kb: ServeKb) -> Iterator[str]:  # noqa: F811
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    fake = FakeOpenAI().start()  # a reranker that fails: the fused order is kept
    fake.script("/v1/rerank", *[Reply({"error": {"message": "down"}}, status=500)] * 50)
    settings = dataclasses.replace(
        serve_kb.as_reader(),
        rerank_provider="api",
        rerank_model="fake-rerank",
        rerank_base_url=fake.base_url,
        rerank_max_retries=0,
    )
    service = KnowledgeService(settings, pool_size=2).open()
    try:
        with running(create_app(service, token=TOKEN)) as url:
            yield url
    finally:
        fake.stop()


def test_metrics_after_a_bounded_load(server: str) -> None:
    refused = httpx.get(server + "/metrics")
    assert refused.status_code == 401  # the token guards the metrics too
    # a browser's Accept header (the web interface's pages need no token) is no way around it
    for accept in ("text/html", "text/html,application/xhtml+xml,*/*;q=0.8"):
        browser = httpx.get(server + "/metrics", headers={"Accept": accept})
        assert browser.status_code == 401, browser.text[:200]
        assert "pgkb_requests_total" not in browser.text
    before = samples(httpx.get(server + "/metrics", headers=AUTH).text)

    searches = 12
    for i in range(searches):
        mode = "keyword" if i % 3 == 0 else "hybrid"
        response = httpx.post(
            server + "/v1/search",
            json={"query": f"{FURNITURE} {i}", "mode": mode, "rerank": mode == "hybrid" or None},
            headers=AUTH,
            timeout=60,
        )
        assert response.status_code == 200, response.text
        if mode == "hybrid":
            assert "reranker failed" in " ".join(response.json()["notes"])
    for question in (FURNITURE, UNKNOWN):
        assert httpx.post(server + "/v1/ask", json={"question": question}, headers=AUTH).is_success
    assert httpx.post(server + "/v1/search", json={"query": ""}, headers=AUTH).status_code == 400
    assert httpx.get(server + "/no/such/path", headers=AUTH).status_code == 404

    scraped = httpx.get(server + "/metrics", headers=AUTH)
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    after = samples(scraped.text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    hybrid = dict(route="/v1/search", mode="hybrid", status="200")
    keyword = dict(route="/v1/search", mode="keyword", status="200")
    assert delta("pgkb_requests_total", **hybrid) == 8
    assert delta("pgkb_requests_total", **keyword) == 4
    assert delta("pgkb_request_seconds_count", route="/v1/search", mode="hybrid") == 8
    assert delta("pgkb_requests_total", route="/v1/search", mode="-", status="400") == 1
    assert delta("pgkb_requests_total", route="other", mode="-", status="404") == 1
    assert delta("pgkb_requests_total", route="/v1/ask", mode="extractive", status="200") == 1
    assert delta("pgkb_requests_total", route="/v1/ask", mode="abstained", status="200") == 1
    assert delta("pgkb_answers_total", mode="extractive") == 1
    assert delta("pgkb_abstentions_total", stage="gate") == 1
    assert delta("pgkb_rerank_fallbacks_total") == 8 + 2  # the asks search (and rerank) too
    assert delta("pgkb_pool_wait_seconds_count") >= searches + 2
    assert value(after, "pgkb_model_load_seconds", model=_model()) > 0
    # the metrics route itself is counted, the scrape before this one included
    assert delta("pgkb_requests_total", route="/metrics", mode="-", status="200") >= 1


def _model() -> str:
    return "sentence-transformers/all-MiniLM-L6-v2"


def test_mcp_over_http_serves_its_tool_calls_as_metrics(serve_kb: ServeKb) -> None:  # noqa: F811
    from mcp import Client

    from loader.serve.mcp import build_server, metrics_endpoint
    from loader.serve.metrics import Metrics
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(serve_kb.as_reader(), pool_size=2).open()
    metrics = Metrics()
    metrics.model_loaded(service.model_name, service.model_load_seconds)
    server = build_server(service, metrics)
    server.custom_route("/metrics", methods=["GET"])(metrics_endpoint(metrics, "127.0.0.1"))
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    try:
        with running(server.streamable_http_app()) as url:

            async def session() -> None:
                async with Client(url + "/mcp") as client:
                    for _ in range(3):
                        result = await client.call_tool("search", {"query": FURNITURE})
                        assert not result.is_error
                    asked = await client.call_tool(
                        "ask", {"question": FURNITURE}, progress_callback=on_progress
                    )
                    assert not asked.is_error, asked.content
                    bad = await client.call_tool("read_document", {"document": "nowhere.md"})
                    assert bad.is_error

            anyio.run(session)
            found = samples(httpx.get(url + "/metrics").text)
            # a web page rebinding its name to 127.0.0.1 reads no metrics (as /mcp answers 421)
            for host in ("attacker.example", "127.0.0.1.nip.io", ""):
                rebound = httpx.get(url + "/metrics", headers={"Host": host})
                assert rebound.status_code == 421, (host, rebound.text[:200])
                assert "pgkb_requests_total" not in rebound.text
    finally:
        metrics.close()
        service.close()
    tool = "pgkb_requests_total"
    assert value(found, tool, route="tool:search", mode="hybrid", status="200") == 3
    assert value(found, tool, route="tool:ask", mode="extractive", status="200") == 1
    assert value(found, tool, route="tool:read_document", mode="-", status="400") == 1
    assert value(found, "pgkb_answers_total", mode="extractive") == 1
    assert value(found, "pgkb_model_load_seconds", model=_model()) > 0
    # the ask tool reported its stages to a client that asked for progress
    assert progress and progress[0] == (1, "searching the knowledge base")
