"""Rerankers: the ``POST /rerank`` client against a local server speaking the wire format
(order, top_n, malformed replies, timeouts, retries), a tiny cross-encoder the test builds, and
the reranker after the fusion in search, ask and eval (a failure keeps the fused order and says
so)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.errors import ConfigError
from loader.ingest.pipeline import ingest_paths
from loader.providers.local import model_folder
from loader.providers.rerank import ApiReranker, LocalReranker, Ranked, RerankError, get_reranker
from loader.search import search
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, Reply, overlap_score
from tests.helpers import ingest_settings, settings_env, write_docs
from tests.tiny_models import build_cross_encoder

DOCS = ["vacuum reclaims dead rows", "btree index range", "wal archive backup", "dead rows"]


def _api(fake: FakeOpenAI, **kwargs: Any) -> tuple[ApiReranker, list[float]]:
    sleeps: list[float] = []
    options: dict[str, Any] = {"timeout": 5.0, "max_retries": 2, "sleep": sleeps.append}
    options.update(kwargs)
    return ApiReranker("fake-rerank", fake.base_url, **options), sleeps


def _results(*pairs: tuple[Any, Any]) -> Reply:
    return Reply({"results": [{"index": i, "relevance_score": s} for i, s in pairs]})


def test_the_request_and_the_order_of_the_results(fake_openai: FakeOpenAI) -> None:
    reranker, _ = _api(fake_openai, api_key="secret")
    ranked = reranker.rerank("vacuum dead rows", DOCS, top_n=2)
    assert ranked == [Ranked(0, 1.0), Ranked(3, overlap_score("vacuum dead rows", DOCS[3]))]
    (sent,) = fake_openai.requests_to("/v1/rerank")
    assert sent.body == {
        "model": "fake-rerank",
        "query": "vacuum dead rows",
        "documents": DOCS,
        "top_n": 2,
    }
    assert sent.headers["authorization"] == "Bearer secret"
    # the server's order is not trusted: sorted by score, ties in the given (fused) order
    fake_openai.script("/v1/rerank", _results((1, 0.2), (3, 0.9), (2, 0.2)))
    assert reranker.rerank("q", DOCS, top_n=3) == [Ranked(3, 0.9), Ranked(1, 0.2), Ranked(2, 0.2)]
    # top_n never exceeds the documents; a bare list with "score" (TEI's own shape) is read too
    fake_openai.script("/v1/rerank", Reply([{"index": 1, "score": 3}, {"index": 0, "score": -1}]))
    assert reranker.rerank("q", DOCS[:2], top_n=10) == [Ranked(1, 3.0), Ranked(0, -1.0)]
    assert fake_openai.requests_to("/v1/rerank")[-1].body["top_n"] == 2
    assert reranker.rerank("q", [], top_n=3) == []


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (_results((0, 0.9)), "1 results for top_n=2 of 4 documents"),
        (_results((0, 0.9), (0, 0.5)), "index 0 appears twice"),
        (_results((0, 0.9), (4, 0.5)), "index 4 is out of range (0..3)"),
        (_results((0, 0.9), (-1, 0.5)), "index -1 is out of range"),
        (_results((0, 0.9), (1, "high")), "the score of index 1 is not a number"),
        (_results((0, 0.9), (1, None)), "the score of index 1 is not a number"),
        (_results((0, 0.9), (1, True)), "the score of index 1 is not a number"),
        (Reply({"results": [{"relevance_score": 1.0}, {"index": 1}]}), "no integer index"),
        (Reply({"data": []}), "no 'results' list"),
        (Reply(raw=b"<html>not json</html>"), "sent a reply pgkb cannot use"),
    ],
)
def test_a_malformed_reply_is_an_error_naming_the_endpoint(
    fake_openai: FakeOpenAI, reply: Reply, why: str
) -> None:
    reranker, _ = _api(fake_openai)
    fake_openai.script("/v1/rerank", reply)
    with pytest.raises(RerankError) as info:
        reranker.rerank("q", DOCS, top_n=2)
    assert why in info.value.message
    assert f"the rerank API at {fake_openai.base_url} (model fake-rerank)" in info.value.message


def test_429_and_500_are_retried(fake_openai: FakeOpenAI) -> None:
    reranker, sleeps = _api(fake_openai)
    fake_openai.script(
        "/v1/rerank",
        Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0.25"}),
        Reply({"error": {"message": "oops"}}, status=500),
    )
    assert reranker.rerank("dead rows", DOCS, top_n=1)[0].index == 0
    assert len(fake_openai.requests_to("/v1/rerank")) == 3
    assert sleeps[0] == 0.25 and len(sleeps) == 2


def test_timeouts_are_retried_then_reported(fake_openai: FakeOpenAI) -> None:
    reranker, sleeps = _api(fake_openai, timeout=0.3, max_retries=1)
    fake_openai.script("/v1/rerank", Reply(delay=1.0), Reply(delay=1.0))
    with pytest.raises(RerankError) as info:
        reranker.rerank("q", DOCS, top_n=2)
    assert "timed out: it did not answer within 0.3 s (gave up after 2 attempts)" in str(
        info.value.message
    )
    assert "PGKB_RERANK_TIMEOUT" in (info.value.hint or "")
    assert len(sleeps) == 1


def test_a_client_error_is_not_retried_and_names_the_settings(fake_openai: FakeOpenAI) -> None:
    reranker, _ = _api(fake_openai)
    fake_openai.script("/v1/rerank", Reply({"error": {"message": "no such model"}}, status=404))
    with pytest.raises(RerankError) as info:
        reranker.rerank("q", DOCS, top_n=2)
    assert "HTTP 404: no such model" in info.value.message
    assert info.value.hint == "check PGKB_RERANK_MODEL and PGKB_RERANK_BASE_URL"
    assert len(fake_openai.requests_to("/v1/rerank")) == 1


def test_settings_make_one_reranker_per_configuration(fake_openai: FakeOpenAI) -> None:
    assert get_reranker(Settings()) is None  # off by default
    api = Settings(rerank_provider="api", rerank_model="m", rerank_base_url=fake_openai.base_url)
    assert get_reranker(api) is get_reranker(api.replace(match_count=3))
    assert get_reranker(api) is not get_reranker(api.replace(rerank_timeout=3.0))
    with pytest.raises(ConfigError, match="PGKB_RERANK_BASE_URL"):
        Settings(rerank_provider="api", rerank_model="m").validate()
    with pytest.raises(ConfigError, match="PGKB_RERANK_MODEL"):
        Settings(rerank_provider="local").validate()


# --- a tiny cross-encoder --------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("models") / "cross")


def test_a_local_cross_encoder_from_a_folder(cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    reranker = LocalReranker(str(cross_encoder))
    ranked = reranker.rerank("vacuum dead rows", DOCS, top_n=3)
    expected = CrossEncoder(str(cross_encoder), device="cpu").predict(
        [("vacuum dead rows", d) for d in DOCS]
    )
    assert [r.index for r in ranked] == sorted(range(4), key=lambda i: -expected[i])[:3]
    assert [r.score for r in ranked] == pytest.approx(sorted(expected, reverse=True)[:3], 1e-5)
    with pytest.raises(RerankError, match="did not finish within"):
        LocalReranker(str(cross_encoder), timeout=1e-6).rerank("q", DOCS * 50, top_n=3)


def test_a_missing_cross_encoder_names_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model_folder.cache_clear()
    with pytest.raises(ConfigError) as info:
        LocalReranker(str(tmp_path / "nowhere")).rerank("q", DOCS, top_n=2)
    assert "rerank_model" in info.value.message and "PGKB_RERANK_MODEL" in (info.value.hint or "")


# --- after the fusion: search, ask, eval ------------------------------------------------------


@pytest.fixture
def kb(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> tuple[Settings, Path]:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    return settings, root


def _search(settings: Settings, query: str, **kwargs: Any) -> Any:
    from loader.db.connect import connect
    from loader.providers.embeddings import get_embedder

    conn = connect(str(settings.database_url))
    try:
        vector = get_embedder(settings).embed_query(query)
        return search(conn, query, vector, settings=settings, **kwargs)
    finally:
        conn.close()


def _reranking(settings: Settings, fake: FakeOpenAI, **more: Any) -> Settings:
    return settings.replace(
        rerank_provider="api",
        rerank_model="fake-rerank",
        rerank_base_url=fake.base_url,
        rerank_max_retries=0,
        **more,
    )


def test_search_reranks_the_fused_candidates(
    kb: tuple[Settings, Path], fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    settings, _ = kb
    query = "archive wal segments"
    fused = _search(settings, query, limit=20)
    reranking = _reranking(settings, fake_openai, rerank_candidates=6, match_count=3)
    notes: list[str] = []
    hits = _search(reranking, query, notes=notes)
    (sent,) = fake_openai.requests_to("/v1/rerank")
    assert len(sent.body["documents"]) == min(6, len(fused)) and sent.body["top_n"] == 3
    assert sent.body["documents"][0].endswith(fused[0].content)  # the fused order went in
    assert len(hits) == 3 and not notes
    scores = [h.rerank_score for h in hits]
    assert scores == sorted(scores, reverse=True)
    position = [h.chunk_id for h in fused].index(hits[0].chunk_id)
    assert scores[0] == overlap_score(query, sent.body["documents"][position])
    assert "Archive WAL segments" in hits[0].content
    # the fused legs are untouched: rerank=False is plain hybrid search
    plain = _search(reranking, query, rerank=False)
    assert [h.chunk_id for h in plain] == [h.chunk_id for h in fused[:3]]
    assert all(h.rerank_score is None for h in plain)

    # a failing reranker: the fused order, said in the notes and on stderr (a warning)
    fake_openai.script("/v1/rerank", Reply({"error": {"message": "down"}}, status=503))
    with caplog.at_level(logging.WARNING, logger="loader.search"):
        fallback = _search(reranking, query, notes=notes)
    assert [h.chunk_id for h in fallback] == [h.chunk_id for h in fused[:3]]
    assert all(h.rerank_score is None for h in fallback)
    assert len(notes) == 1 and "results are in the fused order" in notes[0]
    assert "HTTP 503" in notes[0] and "the rerank API" in caplog.text


def test_ask_and_eval_use_the_reranker(
    kb: tuple[Settings, Path], fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    settings, root = kb
    env = {
        **settings_env(settings),
        "PGKB_RERANK_PROVIDER": "api",
        "PGKB_RERANK_MODEL": "fake-rerank",
        "PGKB_RERANK_BASE_URL": fake_openai.base_url,
        "PGKB_RERANK_MAX_RETRIES": "0",
        "PGKB_ABSTENTION": "false",
    }
    runner = CliRunner()
    asked = runner.invoke(cli, ["ask", "--json", "archive wal segments"], env=env)
    assert asked.exit_code == 0, asked.output
    assert len(fake_openai.requests_to("/v1/rerank")) == 1
    answer = json.loads(asked.stdout)
    assert "Archive WAL segments" in answer["citations"][0]["content"]

    fake_openai.script("/v1/rerank", Reply({"error": {"message": "down"}}, status=500))
    failed = runner.invoke(cli, ["ask", "--json", "archive wal segments"], env=env)
    assert failed.exit_code == 0, failed.output
    assert any("results are in the fused order" in n for n in json.loads(failed.stdout)["notes"])

    questions = tmp_path / "q.json"
    questions.write_text(
        json.dumps(
            [
                {
                    "id": "q1",
                    "question": "dead tuples vacuum",
                    "kind": "exact",
                    "sources": ["vacuum.md"],
                },
                {
                    "id": "q2",
                    "question": "archive WAL segments",
                    "kind": "exact",
                    "sources": ["wal.md"],
                },
            ]
        )
    )
    args = ["eval", "--questions", str(questions), "--corpus", str(root), "--json"]
    fake_openai.script("/v1/rerank", Reply({"error": {"message": "down"}}, status=500))
    evaluated = runner.invoke(cli, args, env=env)
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)
    assert set(report["retrievers"]) == {"vector", "keyword", "hybrid", "reranked"}
    assert report["retrievers"]["reranked"]["overall"]["recall@5"] == 1.0
    assert report["reranked"].startswith("the reranker failed on 1 of 2 queries")
    assert report["parameters"]["rerank_provider"] == "api"
    plain = runner.invoke(cli, args, env=settings_env(settings))
    assert json.loads(plain.stdout)["reranked"].startswith("not run: no reranker is configured")
