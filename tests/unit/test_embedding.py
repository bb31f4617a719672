"""Embedding providers: the OpenAI-compatible client against a local fake server, the local
model for real, and the model check against the database."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from loader.errors import ModelMismatchError, PgkbError
from loader.providers.embeddings import Embedder, get_embedder
from loader.providers.local import LocalEmbedder
from loader.providers.openai_embeddings import OpenAIEmbedder
from loader.providers.registry import ensure_model
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, Reply, fake_vector


def _client(fake: FakeOpenAI, **kwargs: Any) -> tuple[OpenAIEmbedder, list[float]]:
    sleeps: list[float] = []
    options: dict[str, Any] = {"max_retries": 3, "timeout": 5.0, "sleep": sleeps.append}
    options.update(kwargs)
    return OpenAIEmbedder("fake-embed", fake.dims, base_url=fake.base_url, **options), sleeps


def test_openai_vectors_in_input_order_and_batched_by_count(fake_openai: FakeOpenAI) -> None:
    client, _ = _client(fake_openai, batch_size=3)
    texts = [f"text {i}" for i in range(7)]
    vectors = client.embed(texts)
    assert vectors == [pytest.approx(fake_vector(t, fake_openai.dims)) for t in texts]
    bodies = [r.body for r in fake_openai.requests_to("/v1/embeddings")]
    assert [len(b["input"]) for b in bodies] == [3, 3, 1]
    assert all(b["model"] == "fake-embed" for b in bodies)


def test_openai_batches_never_exceed_2048_inputs_or_the_token_budget(
    fake_openai: FakeOpenAI,
) -> None:
    client, _ = _client(fake_openai, batch_size=5000)
    assert client.batch_size == 2048
    assert [len(g) for g in client.batches(["x"] * 5000)] == [2048, 2048, 904]
    client, _ = _client(fake_openai, max_batch_tokens=100)
    texts = ["a" * 150] * 5  # 50 heuristic tokens each: two per request
    client.embed(texts)
    sizes = [len(r.body["input"]) for r in fake_openai.requests_to("/v1/embeddings")]
    assert sizes == [2, 2, 1]


def test_openai_retries_429_honouring_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        "/v1/embeddings",
        Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"}),
        Reply({"error": {"message": "boom"}}, status=503),
    )
    client, sleeps = _client(fake_openai)
    assert client.embed_query("q") == pytest.approx(fake_vector("q", fake_openai.dims))
    assert len(fake_openai.requests_to("/v1/embeddings")) == 3
    assert sleeps[0] == 7.0  # the server's Retry-After
    assert 0 < sleeps[1] <= 1.0  # exponential backoff from 0.5 s, with jitter


def test_openai_retries_timeouts_then_gives_up_with_a_clear_error(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("/v1/embeddings", *[Reply(delay=1.5) for _ in range(3)])
    client, sleeps = _client(fake_openai, timeout=0.5, max_retries=2)
    with pytest.raises(PgkbError) as info:
        client.embed(["a"])
    assert "timed out" in info.value.message
    assert "gave up after 3 attempts" in info.value.message
    assert len(sleeps) == 2


def test_openai_unreachable_api(fake_openai: FakeOpenAI) -> None:
    client = OpenAIEmbedder(
        "m", 8, base_url="http://127.0.0.1:9/v1", max_retries=1, sleep=lambda _: None
    )
    with pytest.raises(PgkbError, match=r"is unreachable \(gave up after 2 attempts\)"):
        client.embed(["a"])


def test_openai_client_errors_are_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script("/v1/embeddings", Reply({"error": {"message": "bad key"}}, status=401))
    client, sleeps = _client(fake_openai)
    with pytest.raises(PgkbError) as info:
        client.embed(["a"])
    assert "HTTP 401" in info.value.message
    assert info.value.hint == "check PGKB_EMBEDDING_API_KEY"
    assert sleeps == []


def test_openai_wrong_number_of_vectors(fake_openai: FakeOpenAI) -> None:
    one = {"object": "embedding", "index": 0, "embedding": [0.1] * fake_openai.dims}
    fake_openai.script("/v1/embeddings", Reply({"object": "list", "data": [one], "model": "m"}))
    client, _ = _client(fake_openai)
    with pytest.raises(PgkbError, match="returned 1 vectors for 2 inputs"):
        client.embed(["a", "b"])


def test_openai_wrong_dims(fake_openai: FakeOpenAI) -> None:
    one = {"object": "embedding", "index": 0, "embedding": [0.1] * 5}
    fake_openai.script("/v1/embeddings", Reply({"object": "list", "data": [one], "model": "m"}))
    client, _ = _client(fake_openai)
    with pytest.raises(ModelMismatchError, match="returned 5-dimensional vectors, but"):
        client.embed(["a"])


def test_openai_reorders_by_index(fake_openai: FakeOpenAI) -> None:
    data = [
        {"object": "embedding", "index": 1, "embedding": [1.0] + [0.0] * 7},
        {"object": "embedding", "index": 0, "embedding": [0.0] * 7 + [1.0]},
    ]
    fake_openai.script("/v1/embeddings", Reply({"object": "list", "data": data, "model": "m"}))
    client, _ = _client(fake_openai)
    first, second = client.embed(["a", "b"])
    assert first[-1] == 1.0
    assert second[0] == 1.0


def test_get_embedder_keeps_one_instance_per_model() -> None:
    a = get_embedder(Settings())
    b = get_embedder(Settings(chunk_tokens=100))
    c = get_embedder(Settings(embedding_provider="openai", embedding_model="x", embedding_dims=8))
    assert a is b
    assert isinstance(a, LocalEmbedder)
    assert isinstance(c, OpenAIEmbedder)
    assert isinstance(a, Embedder)
    assert isinstance(c, Embedder)


def test_embedders_are_immutable_and_cached_by_everything_that_changes_them() -> None:
    base = Settings(embedding_provider="openai", embedding_model="x", embedding_dims=8)
    first = get_embedder(base)
    assert get_embedder(base.replace(chunk_tokens=100)) is first  # not an embedder setting
    bigger = get_embedder(base.replace(embedding_batch_size=16))
    assert bigger is not first and (bigger.batch_size, first.batch_size) == (16, 64)
    assert isinstance(first, OpenAIEmbedder)
    other_url = get_embedder(base.replace(embedding_base_url="http://127.0.0.1:9/v1"))
    assert other_url is not first and first.base_url is None  # the cached one is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.batch_size = 1  # type: ignore[misc]
    local = get_embedder(Settings(embedding_max_input_tokens=128))
    assert local is not get_embedder(Settings()) and local.max_input_tokens == 128
    with pytest.raises(dataclasses.FrozenInstanceError):
        local.max_input_tokens = 256  # type: ignore[misc]


def test_ensure_model_registers_then_refuses_another_model(
    conn: psycopg.Connection[Any],
) -> None:
    first = OpenAIEmbedder("model-a", 8)
    model_id = ensure_model(conn, first)
    assert ensure_model(conn, first) == model_id
    row = conn.execute("SELECT name, dims, provider FROM kb.active_model()").fetchone()
    assert row == ("model-a", 8, "openai")
    with pytest.raises(ModelMismatchError) as info:
        ensure_model(conn, OpenAIEmbedder("model-b", 16))
    message = str(info.value)
    assert "model-b (16 dims)" in message
    assert "model-a (8 dims)" in message
    assert "PGKB_EMBEDDING_MODEL=model-a" in message
    assert conn.execute("SELECT count(*) FROM kb.embedding_models").fetchone() == (1,)


@pytest.mark.model
def test_local_model_embeds_normalised_vectors_that_mean_something(embedder: Any) -> None:
    assert embedder.dims == 384
    assert embedder.provider == "local"
    vectors = embedder.embed(
        [
            "B-tree indexes handle equality and range queries on sortable data.",
            "Autovacuum reclaims storage occupied by dead rows.",
        ]
    )
    query = embedder.embed_query("Which index type supports range queries?")
    assert len(query) == 384
    assert sum(v * v for v in query) == pytest.approx(1.0, abs=1e-4)

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(query, vectors[0]) > cosine(query, vectors[1]) + 0.1
    assert embedder.count_tokens("hello world") == 2


@pytest.mark.model
def test_local_embedders_of_one_model_share_its_loaded_model(embedder: Any) -> None:
    settings = Settings()
    small = get_embedder(settings.replace(embedding_batch_size=2))
    large = get_embedder(settings.replace(embedding_batch_size=128))
    assert small is not large
    assert isinstance(small, LocalEmbedder) and isinstance(large, LocalEmbedder)
    texts = ["a", "b", "c"]
    for one, other in zip(small.embed(texts), large.embed(texts), strict=True):
        assert one == pytest.approx(other, abs=1e-5)
    assert small.model() is large.model() is embedder.model()  # loaded once per model folder
