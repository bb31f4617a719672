"""Changing the embedding model without downtime: models add/list/activate/drop, reembed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.db.connect import connect
from loader.errors import ModelMismatchError, PgkbError
from loader.ingest.pipeline import ingest_paths
from loader.ops.models import reembed
from loader.providers.embeddings import get_embedder
from loader.providers.registry import ensure_model
from loader.search import search
from loader.settings import Settings, load_settings
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import ingest_settings, settings_env, write_docs


def run(args: list[str], env: dict[str, str], **kw: Any) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False, **kw)


@pytest.fixture
def kb(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> tuple[Settings, dict[str, str]]:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    return settings, settings_env(settings)


def _models(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    result = run(["models", "list", "--json"], env)
    assert result.exit_code == 0, result.output
    return {m["name"]: m for m in json.loads(result.stdout)}


def _add(env: dict[str, str], fake: FakeOpenAI, name: str, dims: int) -> Any:
    return run(
        [
            "models",
            "add",
            name,
            "--dims",
            str(dims),
            "--provider",
            "openai",
            "--base-url",
            fake.base_url,
        ],
        env,
    )


def _top(settings: Settings, query: str) -> list[tuple[int, float]]:
    from loader.providers.embeddings import get_embedder

    vector = get_embedder(settings).embed_query(query)
    conn = connect(str(settings.database_url))
    try:
        hits = search(conn, query, vector, settings=settings, limit=5)
    finally:
        conn.close()
    return [(h.chunk_id, round(h.score, 9)) for h in hits]


def _answered_from(settings: Settings, query: str) -> list[tuple[int, float]]:
    """:func:`_top`, checked independently of the search path: every hit's vector similarity
    is the cosine of the query and that chunk's stored vector of ``settings``' model (so a
    search answered from another model's vectors fails here, not only against a baseline
    computed by the same search)."""
    import numpy as np

    from loader.providers.embeddings import get_embedder

    vector = np.asarray(get_embedder(settings).embed_query(query), dtype=float)
    conn = connect(str(settings.database_url))
    try:
        hits = search(conn, query, vector.tolist(), settings=settings, limit=5)
        stored = dict(
            conn.execute(
                "SELECT e.chunk_id, e.embedding FROM kb.embeddings e "
                "JOIN kb.embedding_models m ON m.id = e.model_id WHERE m.name = %s",
                (settings.embedding_model,),
            ).fetchall()
        )
    finally:
        conn.close()
    scored = [h for h in hits if h.vector_similarity is not None]
    assert scored, "the vector leg answered"
    for hit in scored:
        own = np.asarray(stored[hit.chunk_id].to_numpy(), dtype=float)
        cosine = float(vector @ own / (np.linalg.norm(vector) * np.linalg.norm(own)))
        assert hit.vector_similarity == pytest.approx(cosine, abs=1e-5), (
            settings.embedding_model,
            hit.chunk_id,
        )
    return [(h.chunk_id, round(h.score, 9)) for h in hits]


def test_add_reembed_activate_and_roll_back(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    settings, env = kb
    chunks = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0]
    conn.rollback()
    added = _add(env, fake_openai, "fake-embed-2", 8)
    assert added.exit_code == 0, added.output
    listed = _models(env)
    assert listed["fake-embed"]["is_active"] and listed["fake-embed"]["missing"] == 0
    assert listed["fake-embed-2"]["missing"] == chunks and listed["fake-embed-2"]["embeddings"] == 0
    assert listed["fake-embed-2"]["config"] == {"base_url": fake_openai.base_url}
    assert listed["fake-embed-2"]["index_valid"] is True

    # activation is refused while chunks lack its vectors, with the count
    refused = run(["models", "activate", "fake-embed-2"], env)
    assert refused.exit_code == 2
    assert f"{chunks} chunk(s) have no embedding of it" in refused.stderr
    assert "pgkb models reembed --model fake-embed-2" in refused.stderr
    assert _models(env)["fake-embed"]["is_active"]

    # searches keep using the active model and return the same results while reembed runs
    baseline = _top(settings, "vacuum dead tuples")
    assert baseline
    during: list[list[tuple[int, float]]] = []

    def search_meanwhile(event: str, info: dict[str, Any]) -> None:
        if event == "batch":
            during.append(_top(settings, "vacuum dead tuples"))

    fake_openai.requests.clear()
    report = reembed(settings, "fake-embed-2", batch_size=2, progress=search_meanwhile)
    assert report.embedded == chunks and report.remaining == 0
    assert len(during) == report.batches >= 2
    assert all(result == baseline for result in during)
    by_model: dict[str, int] = {}
    for r in fake_openai.requests_to("/v1/embeddings"):
        by_model[r.body["model"]] = by_model.get(r.body["model"], 0) + len(r.body["input"])
    # every chunk went to the new model; the searches meanwhile embedded their query
    assert by_model == {"fake-embed-2": chunks, "fake-embed": len(during)}

    activated = run(["models", "activate", "fake-embed-2"], env)
    assert activated.exit_code == 0, activated.output
    assert _models(env)["fake-embed-2"]["is_active"]
    # the old model's vectors stay: rolling back is one statement
    assert run(["models", "activate", "fake-embed"], env).exit_code == 0
    assert _models(env)["fake-embed"]["is_active"]
    assert _top(settings, "vacuum dead tuples") == baseline

    refused_drop = run(["models", "drop", "fake-embed", "--yes"], env)
    assert refused_drop.exit_code == 2 and "is the active model" in refused_drop.stderr
    dropped = run(["models", "drop", "fake-embed-2", "--yes"], env)
    assert dropped.exit_code == 0, dropped.output
    assert f"dropped fake-embed-2 (8 dims) and {chunks} embeddings" in dropped.stdout
    assert set(_models(env)) == {"fake-embed"}
    left = conn.execute(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = 'kb'"
        " AND indexname LIKE 'embeddings_hnsw_model_%'"
    ).fetchone()[0]
    assert left == 1


def test_reembed_resumes_after_an_interruption(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI
) -> None:
    settings, env = kb
    assert _add(env, fake_openai, "fake-embed-2", 8).exit_code == 0
    total = _models(env)["fake-embed-2"]["missing"]
    fake_openai.requests.clear()
    # the second batch's request fails (no retries configured): the first batch stays stored
    fake_openai.script("/v1/embeddings", _ok, Reply(status=500))
    with pytest.raises(PgkbError):
        reembed(settings, "fake-embed-2", batch_size=2)
    after_failure = _models(env)["fake-embed-2"]
    assert after_failure["embeddings"] == 2 and after_failure["missing"] == total - 2
    fake_openai.requests.clear()
    result = run(["models", "reembed", "--model", "fake-embed-2", "--json"], env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["embedded"] == total - 2
    sent = sum(len(r.body["input"]) for r in fake_openai.requests_to("/v1/embeddings"))
    assert sent == total - 2  # only what was missing
    assert _models(env)["fake-embed-2"]["missing"] == 0
    again = run(["models", "reembed", "--model", "fake-embed-2"], env)
    assert again.exit_code == 0 and "0 chunks embedded, 0 missing" in again.stdout


def _ok(request: Any) -> Reply:
    from tests.fake_openai import fake_vector

    inputs = request.body["input"]
    data = [
        {"object": "embedding", "index": i, "embedding": fake_vector(t, 8)}
        for i, t in enumerate(inputs)
    ]
    return Reply(
        {
            "object": "list",
            "data": data,
            "model": "x",
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
    )


def test_a_model_whose_vectors_disagree_with_its_dims_is_refused(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    _, env = kb
    before = conn.execute("SELECT count(*) FROM kb.embeddings").fetchone()[0]
    conn.rollback()
    assert _add(env, fake_openai, "claims-16", 16).exit_code == 0  # the server returns 8
    result = run(["models", "reembed", "--model", "claims-16"], env)
    assert result.exit_code == 2
    assert "returned 8-dimensional vectors, but it is registered with 16 dims" in result.stderr
    assert _models(env)["claims-16"]["embeddings"] == 0
    assert conn.execute("SELECT count(*) FROM kb.embeddings").fetchone()[0] == before
    assert _models(env)["fake-embed"]["is_active"]


def test_two_reembed_runs_at_once(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI
) -> None:
    settings, env = kb
    assert _add(env, fake_openai, "fake-embed-2", 8).exit_code == 0
    first_batch_done = threading.Event()
    second_tried = threading.Event()
    errors: list[BaseException] = []

    def hold(event: str, info: dict[str, Any]) -> None:
        if event == "batch" and not first_batch_done.is_set():
            first_batch_done.set()
            second_tried.wait(60)

    def first() -> None:
        try:
            reembed(settings, "fake-embed-2", batch_size=2, progress=hold)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert first_batch_done.wait(60)
        second = run(["models", "reembed", "--model", "fake-embed-2", "--no-wait"], env)
        assert second.exit_code == 2
        assert "pgkb models reembed (backend pid" in second.stderr
        assert "does not run beside it" in second.stderr
        # an ingest is kept out the same way
        root = Path(settings.data_dir).parent / "docs"
        ingest = run(["ingest", str(root), "--no-wait"], env)
        assert ingest.exit_code == 2 and "another pgkb ingest is running" in ingest.stderr
    finally:
        second_tried.set()
        thread.join(60)
    assert not errors
    assert _models(env)["fake-embed-2"]["missing"] == 0


def test_unknown_models_are_named(kb: tuple[Settings, dict[str, str]]) -> None:
    _, env = kb
    for args in (
        ["models", "reembed", "--model", "nope"],
        ["models", "activate", "nope"],
        ["models", "drop", "nope", "--yes"],
    ):
        result = run(args, env)
        assert result.exit_code == 2
        assert "'nope' is not registered (registered: fake-embed (8 dims))" in result.stderr
    dup = run(["models", "add", "fake-embed", "--dims", "8", "--provider", "openai"], env)
    assert dup.exit_code == 2 and "registered already" in dup.stderr


def test_eval_compares_a_model_before_switching(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    settings, env = kb
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
    assert _add(env, fake_openai, "fake-embed-2", 8).exit_code == 0
    args = ["eval", "--questions", str(questions), "--model", "fake-embed-2", "--json"]
    early = run(args, env)
    assert early.exit_code == 2  # --json: the error is the JSON object on stdout, not stderr
    assert "have no embedding of fake-embed-2" in json.loads(early.stdout)["error"]
    reembed(settings, "fake-embed-2")
    fake_openai.requests.clear()
    result = run(args, env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["parameters"]["embedding_model"] == "fake-embed-2"
    # the questions were embedded by the model under test, and nothing was ingested
    assert {r.body["model"] for r in fake_openai.requests_to("/v1/embeddings")} == {"fake-embed-2"}
    assert _models(env)["fake-embed"]["is_active"]


@pytest.mark.parametrize("dims", [768, 1024, 1536])
def test_an_api_model_with_prompts_and_dimensions_end_to_end(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI, dims: int
) -> None:
    """models add (prompts, dimensions) -> reembed -> activate -> search with the new model: the
    endpoint gets the document prompt before every passage, the query prompt before the query,
    and ``dimensions`` in every request."""
    _, env = kb
    name = f"fake-embed-{dims}"
    added = run(
        [
            *("models", "add", name, "--dims", str(dims), "--provider", "openai"),
            *("--base-url", fake_openai.base_url, "--request-dimensions"),
            *("--query-prompt", "query: ", "--document-prompt", "passage: "),
        ],
        env,
    )
    assert added.exit_code == 0, added.output
    assert _models(env)[name]["config"] == {
        "base_url": fake_openai.base_url,
        "query_prompt": "query: ",
        "document_prompt": "passage: ",
        "request_dimensions": True,
    }
    fake_openai.requests.clear()
    filled = run(["models", "reembed", "--model", name, "--json"], env)
    assert filled.exit_code == 0, filled.output
    chunks = json.loads(filled.stdout)["embedded"]
    sent = fake_openai.requests_to("/v1/embeddings")
    inputs = [text for r in sent for text in r.body["input"]]
    assert len(inputs) == chunks > 0
    assert all(text.startswith("passage: ") for text in inputs)
    assert {(r.body["model"], r.body.get("dimensions")) for r in sent} == {(name, dims)}

    assert run(["models", "activate", name], env).exit_code == 0
    new_env = {
        **env,
        "PGKB_EMBEDDING_MODEL": name,
        "PGKB_EMBEDDING_DIMS": str(dims),
        "PGKB_EMBEDDING_QUERY_PROMPT": "query: ",
        "PGKB_EMBEDDING_DOCUMENT_PROMPT": "passage: ",
        "PGKB_EMBEDDING_REQUEST_DIMENSIONS": "true",
    }
    fake_openai.requests.clear()
    found = run(["search", "vacuum dead tuples", "--mode", "vector", "--json"], new_env)
    assert found.exit_code == 0, found.output
    hits = json.loads(found.stdout)
    assert hits and all(h["vector_similarity"] is not None for h in hits)
    (query,) = fake_openai.requests_to("/v1/embeddings")
    assert query.body["input"] == ["query: vacuum dead tuples"]
    assert query.body["dimensions"] == dims
    # embedding with other prompts than the registered ones is refused, naming the setting
    other = load_settings(env={**new_env, "PGKB_EMBEDDING_QUERY_PROMPT": "search: "})
    conn = connect(str(other.database_url))
    try:
        with pytest.raises(ModelMismatchError) as info:
            ensure_model(conn, get_embedder(other))
    finally:
        conn.close()
    assert "PGKB_EMBEDDING_QUERY_PROMPT='search: ' (registered: 'query: ')" in info.value.message


def test_activate_and_reembed_under_a_stream_of_searches(
    kb: tuple[Settings, dict[str, str]], fake_openai: FakeOpenAI
) -> None:
    """Searches run without pause, configured for the first model (three threads, while the
    second is re-embedded and then while activation goes back and forth) and for the second
    (a thread from the moment its vectors are complete): no search errs, and each returns the
    results of the model its query was embedded with, whichever model is active (a search
    answered from the active model's vectors would hand one model's query to the other's
    vectors, and the scores would change: the two baselines differ, so the test can tell)."""
    from tests.fake_openai import Request, fake_vector

    settings, env = kb
    second = settings.replace(embedding_model="fake-embed-2")

    def by_model(request: Request) -> Reply:
        """The second model's vectors differ from the first's (a mix would change scores)."""
        prefix = "" if request.body["model"] == "fake-embed" else "model 2: "
        data = [
            {"object": "embedding", "index": n, "embedding": fake_vector(prefix + t, 8)}
            for n, t in enumerate(request.body["input"])
        ]
        return Reply({"object": "list", "data": data, "model": request.body["model"]})

    fake_openai.script("/v1/embeddings", *[by_model] * 20_000)
    assert _add(env, fake_openai, "fake-embed-2", 8).exit_code == 0
    baselines = {"fake-embed": _answered_from(settings, "vacuum dead tuples")}
    stop = threading.Event()
    errors: list[str] = []
    results: dict[str, list[list[tuple[int, float]]]] = {"fake-embed": [], "fake-embed-2": []}

    def searcher(config: Settings) -> None:
        while not stop.is_set():
            try:
                results[config.embedding_model].append(_top(config, "vacuum dead tuples"))
            except Exception as exc:  # reported below
                errors.append(f"{config.embedding_model}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=searcher, args=(settings,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        reembed(settings, "fake-embed-2", batch_size=2)
        baselines["fake-embed-2"] = _answered_from(second, "vacuum dead tuples")
        assert baselines["fake-embed-2"] != baselines["fake-embed"]
        threads.append(threading.Thread(target=searcher, args=(second,)))
        threads[-1].start()
        for model in ("fake-embed-2", "fake-embed", "fake-embed-2", "fake-embed"):
            assert run(["models", "activate", model], env).exit_code == 0
            seen = {name: len(found) for name, found in results.items()}
            # wait (by events, not time; bounded) until both models' searches ran under this
            # activation
            deadline = time.monotonic() + 120
            while not errors and any(len(results[n]) < seen[n] + 2 for n in seen):
                assert time.monotonic() < deadline, "no searches ran under this activation"
                stop.wait(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors[:3]
    assert len(results["fake-embed"]) >= 12 and len(results["fake-embed-2"]) >= 8
    for name, found in results.items():
        wrong = [r for r in found if r != baselines[name]]
        assert not wrong, (name, len(wrong), wrong[:1], baselines[name])
