"""``pgkb serve`` on a real uvicorn server (an ephemeral 127.0.0.1 port, one per module) running
as a ``pgkb db grant --read`` role, with a bearer token.

Checked: OpenAI's own client embeds through ``/v1/embeddings`` and gets pgkb's vector, which fed
to ``hybrid_search`` in SQL as the reader role ranks like ``pgkb search``; the token is refused
when missing or wrong; an oversized body is refused; 50 concurrent requests all succeed; errors
are JSON ``{"error": {"message", "type"}}``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from tests.helpers import uvicorn_thread
from tests.serve_fixtures import ServeKb

pytestmark = pytest.mark.model

TOKEN = "s3cret-token"
FURNITURE = "Who covers the cost of furniture for my home workspace?"
INDEX = "How do I build an index without locking writes?"


@pytest.fixture(scope="module")
def served(serve_kb: ServeKb) -> Iterator[tuple[str, Any]]:
    """Base URL of ``pgkb serve``'s app on uvicorn as ``pgkb serve`` configures it, as the
    reader role, with a token; and its service."""
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(serve_kb.as_reader(), pool_size=4).open()
    app = create_app(service, token=TOKEN, max_body=64_000, concurrency=8)
    with uvicorn_thread(app) as port:
        yield f"http://127.0.0.1:{port}", service
    assert service.pool.closed  # the lifespan closed the pool at shutdown


@pytest.fixture(scope="module")
def server(served: tuple[str, Any]) -> str:
    return served[0]


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_openai_client_embeddings_match_pgkb_and_rank_like_the_cli_in_sql(
    server: str,
    serve_kb: ServeKb,
    embedder: Any,
) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server + "/v1", api_key=TOKEN, max_retries=0)
    response = client.embeddings.create(model=embedder.name, input=FURNITURE)
    vector = np.asarray(response.data[0].embedding, dtype=np.float64)
    ours = np.asarray(embedder.embed_query(FURNITURE), dtype=np.float64)
    assert len(vector) == 384 and response.model == embedder.name
    cosine = float(vector @ ours / (np.linalg.norm(vector) * np.linalg.norm(ours)))
    assert cosine >= 0.9999
    assert response.usage.prompt_tokens > 5

    # the vector into hybrid_search as the reader role, as a service would in psql
    with psycopg.connect(serve_kb.reader_url) as reader:
        from pgvector.psycopg import register_vector

        register_vector(reader)
        model = reader.execute("SELECT name, dims FROM active_model()").fetchone()
        assert model == (embedder.name, 384)
        rows = reader.execute(
            "SELECT chunk_id FROM hybrid_search(%s, %s::vector)",
            (FURNITURE, "[" + ",".join(map(str, vector.tolist())) + "]"),
        ).fetchall()
    result = CliRunner().invoke(
        cli, ["search", FURNITURE, "--json"], env=serve_kb.env(serve_kb.reader_url)
    )
    assert result.exit_code == 0, result.output
    cli_ids = [hit["chunk_id"] for hit in json.loads(result.stdout)]
    assert [r[0] for r in rows] == cli_ids
    assert json.loads(result.stdout)[0]["source_uri"].endswith("equipment.md")

    # several inputs, float format through plain HTTP
    many = httpx.post(
        server + "/v1/embeddings",
        json={"input": [FURNITURE, INDEX], "encoding_format": "float"},
        headers=_auth(),
    )
    assert many.status_code == 200, many.text
    body = many.json()
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"]
    first = np.asarray(body["data"][0]["embedding"])
    assert float(first @ ours) >= 0.9999
    encoded = httpx.post(
        server + "/v1/embeddings",
        json={"input": INDEX, "encoding_format": "base64"},
        headers=_auth(),
    ).json()
    decoded = np.frombuffer(base64.b64decode(encoded["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, body["data"][1]["embedding"], atol=1e-6)
    models = httpx.get(server + "/v1/models", headers=_auth()).json()
    # the chat models first (a chat UI picks the first), then the embedding model
    ids = [m["id"] for m in models["data"]]
    assert ids[0] == "pgkb" and ids[-1] == embedder.name, ids


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"input": "x", "dimensions": 1536}, "384 dimensions"),
        ({"input": "x", "model": "text-embedding-3-small"}, "embeds with"),
        ({"input": []}, "non-empty list"),
        ({"input": [1, 2, 3]}, "must be a string"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "colour": "red"}, "unknown field"),
    ],
)
def test_embeddings_refuse_what_they_cannot_honour(
    server: str, payload: dict[str, Any], says: str
) -> None:
    response = httpx.post(server + "/v1/embeddings", json=payload, headers=_auth())
    assert response.status_code == 400
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"


def test_search_and_ask_return_json(server: str) -> None:
    found = httpx.post(
        server + "/v1/search", json={"query": INDEX, "limit": 3}, headers=_auth()
    ).json()
    assert len(found["results"]) == 3
    assert found["results"][0]["source_uri"].endswith("createindex.md")
    # "cost" is in a page of each category: the category keeps the handbook's only
    both = httpx.post(
        server + "/v1/search", json={"query": "cost", "mode": "keyword"}, headers=_auth()
    ).json()
    assert {r["category"] for r in both["results"]} == {"handbook", "engineering"}, both
    scoped = httpx.post(
        server + "/v1/search",
        json={"query": "cost", "category": "handbook", "mode": "keyword"},
        headers=_auth(),
    ).json()
    assert [r["source_uri"] for r in scoped["results"]] == ["handbook/equipment.md"], scoped
    answer = httpx.post(server + "/v1/ask", json={"question": FURNITURE}, headers=_auth()).json()
    assert answer["citations"][0]["source_uri"].endswith("equipment.md")
    assert answer["mode"] == "extractive"
    for path, payload, says in (
        ("/v1/search", {"query": ""}, "non-empty"),
        ("/v1/search", {"query": "x", "limit": 0}, "limit"),
        ("/v1/search", {"query": "x", "mode": "fuzzy"}, "mode"),
        ("/v1/search", {"query": "x", "metadata": "hr"}, "metadata"),
        ("/v1/ask", {"question": 3}, "question"),
    ):
        response = httpx.post(server + path, json=payload, headers=_auth())
        assert response.status_code == 400, (path, payload)
        assert says in response.json()["error"]["message"]
    bad = httpx.post(
        server + "/v1/search",
        content=b"{not json",
        headers={**_auth(), "Content-Type": "application/json"},
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    missing = httpx.get(server + "/v2/nothing", headers=_auth())
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"


def test_the_token_is_required_but_not_for_healthz(server: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = httpx.post(server + "/v1/search", json={"query": "x"}, headers=headers)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "authentication_error"
    health = httpx.get(server + "/healthz")
    assert health.status_code == 200
    assert health.json()["database"] is True and health.json()["model_loaded"] is True


def test_an_oversized_body_is_refused(server: str) -> None:
    big = {"input": "word " * 20_000}
    response = httpx.post(server + "/v1/embeddings", json=big, headers=_auth())
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"input": "'
        for _ in range(100):
            yield b"word " * 200
        yield b'"}'

    streamed = httpx.post(
        server + "/v1/embeddings",
        content=chunks(),
        headers={**_auth(), "Content-Type": "application/json"},
    )
    assert streamed.status_code == 413


def test_fifty_concurrent_requests_all_succeed(server: str) -> None:
    questions = [FURNITURE, INDEX, "parental leave weeks", "hotel reimbursement", "VACUUM"]

    def one(i: int) -> int:
        path, payload = (
            ("/v1/search", {"query": questions[i % 5]})
            if i % 2
            else ("/v1/embeddings", {"input": questions[i % 5]})
        )
        return httpx.post(server + path, json=payload, headers=_auth(), timeout=120).status_code

    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(one, range(50)))
    assert codes == [200] * 50


def test_the_pool_only_reads_even_as_the_owner(serve_kb: ServeKb) -> None:
    from loader.app import BadRequest
    from loader.serve.service import KnowledgeService

    with KnowledgeService(serve_kb.settings, pool_size=1) as service:
        for statement in (
            "DELETE FROM kb.documents",
            "INSERT INTO kb.settings (key, value) VALUES ('x', '1')",
        ):
            with (
                pytest.raises(BadRequest, match="read-only transaction"),
                service.connection() as conn,
            ):
                conn.execute(statement)
        assert service.health()["database"] is True
    with psycopg.connect(serve_kb.url) as conn:
        assert conn.execute("SELECT count(*) FROM kb.documents").fetchone() == (5,)


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/v1/search", '{"query": "vacuum \\ud800"}', "query"),
        ("/v1/search", '{"query": "vacuum", "source": "%\\udfff%"}', "source"),
        ("/v1/search", '{"query": "vacuum", "metadata": {"team": "\\ud800"}}', "metadata.team"),
        ("/v1/embeddings", '{"input": "\\ud800"}', "input"),
        ("/v1/embeddings", '{"input": ["fine", "a\\ud83d"]}', "input[1]"),
        ("/v1/ask", '{"question": "\\udc00?"}', "question"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(
    server: str, path: str, body: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    response = httpx.post(
        server + path,
        content=body.encode(),
        headers={**_auth(), "Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"{where} holds a lone surrogate"), error
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no traceback logged
    # a surrogate pair is a character, not an error
    pair = httpx.post(
        server + "/v1/search",
        content=b'{"query": "vacuum \\ud83d\\ude00"}',
        headers={**_auth(), "Content-Type": "application/json"},
        timeout=120,
    )
    assert pair.status_code == 200, pair.text


def test_a_page_of_another_origin_reaches_nothing(server: str) -> None:
    """DNS rebinding: the page's name in Host (421); a CORS-simple text/plain body (415)."""
    rebound = httpx.post(
        server + "/v1/search",
        json={"query": "vacuum"},
        headers={**_auth(), "Host": "attacker.example"},
    )
    assert rebound.status_code == 421
    assert rebound.json()["error"]["type"] == "misdirected_request"
    simple = httpx.post(
        server + "/v1/search",
        content=b'{"query": "vacuum"}',
        headers={**_auth(), "Content-Type": "text/plain;charset=UTF-8"},
    )
    assert simple.status_code == 415
    assert simple.json()["error"]["type"] == "unsupported_media_type"


class _Spy:
    """The service's embedder, recording each model call in order. With ``hold_first_batch``,
    the first batch call returns only once a query waits for the model (``turns``), so the
    query's place among the batch's slices does not depend on how fast the machine is."""

    def __init__(self, embedder: Any, calls: list[str], turns: Any = None) -> None:
        self._embedder = embedder
        self._calls = calls
        self._turns = turns

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    def embed(self, texts: Any) -> Any:
        self._calls.append(f"batch of {len(texts)}")
        if self._turns is not None and self._calls.count("query") == 0:
            deadline = time.monotonic() + 300
            while self._turns._queries == 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # a search's query is queued for the model: then return
            self._turns = None
        return self._embedder.embed(texts)

    def embed_query(self, text: str) -> Any:
        self._calls.append("query")
        return self._embedder.embed_query(text)


def test_a_large_embeddings_request_does_not_starve_searches(
    served: tuple[str, Any], monkeypatch: pytest.MonkeyPatch, embedder: Any
) -> None:
    """256 long inputs: embedded 16 at a time, and a search's query goes before the next 16."""
    server, service = served
    calls: list[str] = []
    monkeypatch.setattr(service, "embedder", _Spy(service.embedder, calls, service.turns))
    words = "vacuum reclaims storage of dead tuples while autovacuum keeps tables healthy "
    texts = [f"{i} " + words * 2 for i in range(256)]  # 42 kB: within the 64 kB limit
    with ThreadPoolExecutor(max_workers=1) as pool:
        big = pool.submit(
            httpx.post,
            server + "/v1/embeddings",
            json={"input": texts},
            headers=_auth(),
            timeout=900,
        )
        deadline = time.monotonic() + 300
        while not calls:  # the batch has reached the model
            assert not big.done() and time.monotonic() < deadline, big
            time.sleep(0.02)
        found = httpx.post(
            server + "/v1/search", json={"query": INDEX}, headers=_auth(), timeout=900
        )
        assert found.status_code == 200, found.text
        response = big.result(timeout=900)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 256
    # the query went in right after the slice it waited behind, before the other 15
    assert calls == ["batch of 16", "query"] + ["batch of 16"] * 15, calls
    assert max(int(c.rsplit(" ", 1)[1]) for c in calls if c != "query") <= 16
    last = np.asarray(response.json()["data"][255]["embedding"])
    ours = np.asarray(embedder.embed([texts[255]])[0])
    assert float(last @ ours / (np.linalg.norm(last) * np.linalg.norm(ours))) >= 0.9999


def test_the_service_embeds_a_questions_words_as_the_gate_expects(
    served: tuple[str, Any], embedder: Any
) -> None:
    """The abstention gate finds the embedder's batch function by name (``embed``: one vector
    per text) on whatever ``ask`` is given, the service included. The service's ``embed`` was
    the HTTP route's, returning vectors and a token count, which the gate could not read."""
    from loader.answer.abstention.focus import focus_coverage
    from loader.answer.retrieval import batch_embed

    _, service = served
    embed = batch_embed(service)
    assert embed is not None
    vectors = embed(["bicycle", "scheme", "vacuum"])
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors)
    assert np.allclose(vectors[2], embedder.embed(["vacuum"])[0], atol=1e-5)
    coverage = focus_coverage(["bicycle"], {}, ["Book trains for journeys"], embed)
    assert coverage is not None and 0 < coverage < 1
