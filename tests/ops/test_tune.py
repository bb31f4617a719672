"""pgkb models tune end to end in the embedded database, with a tiny model the test builds:
train, register, re-embed beside the active model, gate, activate only without a loss; an
interrupted tune leaves the active model serving and resumes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.db.connect import connect
from loader.evaluation.harness import evaluate_questions
from loader.ingest.pipeline import ingest_paths
from loader.ops.models import activate, find_model, model_settings
from loader.ops.tune import PairSources, tune
from loader.ops.tune_train import PROVENANCE, TrainOptions
from loader.settings import Settings, load_settings
from tests.tiny_models import WORDS, build_sentence_model

VOCAB = [w for w in WORDS if len(w) > 3][:20]
"""The documents' words."""
ASKED = [w for w in WORDS if len(w) > 3][20:]
"""The probe questions' words: none in a document, so no training pair resembles a question and
every gate set leaves the pairs (and so the tuned model) as they are."""
PLAIN = PairSources(negatives=False)
"""The gate's test trains on in-batch negatives only: with hard negatives the tiny model moves
every probe question, and the test needs some it leaves in place."""
ONE_STEP = TrainOptions(max_steps=1, batch_size=256)
"""One step over every pair (a bounded tune trains on a seeded sample of steps x batch size)."""
OPTIONS = TrainOptions(
    seed=0, epochs=3, max_steps=12, batch_size=8, learning_rate=5e-3, max_seq_length=32
)


@pytest.fixture
def tiny_kb(db_url: str, tmp_path: Path) -> Settings:
    """16 documents of the tiny model's words, each a title and two sections, ingested with a
    tiny local model (the active one)."""
    return _tiny_kb(db_url, tmp_path, 16)


def _tiny_kb(db_url: str, tmp_path: Path, documents: int) -> Settings:
    folder = build_sentence_model(tmp_path / "tiny", max_seq_length=64)
    root = tmp_path / "docs"
    root.mkdir()
    rng = random.Random(7)
    for i in range(documents):
        title = " ".join(rng.sample(VOCAB, 2)).title()
        sentences = [" ".join(rng.sample(VOCAB, 8)).capitalize() + "." for _ in range(8)]
        heads = rng.sample(VOCAB, 2)
        (root / f"doc{i:02}.md").write_text(
            f"# {title}\n\n## {heads[0].title()} notes\n\n{' '.join(sentences[:4])}\n\n"
            f"## {heads[1].title()} notes\n\n{' '.join(sentences[4:])}\n"
        )
    settings = load_settings(
        env={},
        database_url=db_url,
        data_dir=str(tmp_path / "data"),
        embedding_provider="local",
        embedding_model=str(folder),
        embedding_dims=32,
        embedding_batch_size=4,  # reembed commits 16 chunks at a time
        chunk_overlap=0,
    )
    assert ingest_paths(settings, [root]).exit_code == 0
    return settings


def _models(settings: Settings) -> dict[str, tuple[bool, int]]:
    conn = connect(str(settings.database_url))
    try:
        rows = conn.execute("SELECT name, is_active, missing FROM kb.models()").fetchall()
    finally:
        conn.close()
    return {name: (active, missing) for name, active, missing in rows}


def _ranks(report: dict[str, Any]) -> dict[str, dict[str, dict[str, int | None]]]:
    return {
        row["id"]: {mode: row[mode]["ranks"] for mode in ("vector", "keyword", "hybrid")}
        for row in report["per_question"]
    }


def _write(path: Path, questions: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(questions))
    return path


def test_tune_gate_refuses_a_loss_and_activates_without_one(
    tiny_kb: Settings, tmp_path: Path
) -> None:
    settings = tiny_kb
    base = settings.embedding_model

    # without a question set: trained, registered, filled, left inactive
    report = tune(settings, PLAIN, OPTIONS)
    assert report.trained and not report.activated
    assert "no question set" in report.verdict
    tuned = report.model
    assert tuned != base and Path(tuned).is_dir()
    assert _models(settings) == {base: (True, 0), tuned: (False, 0)}
    provenance = json.loads((Path(tuned) / PROVENANCE).read_text())
    assert provenance["base_model"]["name"] == base
    assert provenance["training"]["seed"] == 0
    assert provenance["steps"] == report.steps == OPTIONS.steps(provenance["pairs"]["count"])
    assert provenance["pairs"]["count"] == sum(report.pairs.values()) > 24
    assert set(provenance["pairs"]["kinds"]) == {"title", "heading", "span"}
    assert len(provenance["corpus_digest"]) == 64
    assert {"sentence-transformers", "transformers", "torch"} <= set(provenance["libraries"])

    # questions of random words, each answered (by construction) by the base model's first
    # vector hit; then the questions the tuned model loses from the top 5, and those it ranks
    # exactly as the base does in every retriever
    rng = random.Random(3)
    texts = [" ".join(rng.sample(ASKED, 3)) for _ in range(30)]
    probe = _write(
        tmp_path / "probe.json",
        [
            {"id": f"p{i}", "question": t, "kind": "paraphrase", "sources": ["none.md"]}
            for i, t in enumerate(texts)
        ],
    )
    with connect(str(settings.database_url)) as conn:
        tuned_settings = model_settings(settings, find_model(conn, tuned))
    first = evaluate_questions(settings, questions_file=probe, corpus=None, ingest=False)
    sources = {r["id"]: Path(r["vector"]["top"][0]).name for r in first["per_question"]}
    candidates = _write(
        tmp_path / "candidates.json",
        [
            {"id": f"p{i}", "question": t, "kind": "paraphrase", "sources": [sources[f"p{i}"]]}
            for i, t in enumerate(texts)
        ],
    )
    before = _ranks(
        evaluate_questions(settings, questions_file=candidates, corpus=None, ingest=False)
    )
    after = _ranks(
        evaluate_questions(tuned_settings, questions_file=candidates, corpus=None, ingest=False)
    )

    def rank(ranks: dict[str, int | None]) -> int:
        return next(iter(ranks.values())) or 99

    lost = [q for q in before if rank(before[q]["vector"]) <= 5 < rank(after[q]["vector"])]
    # the questions no retriever ranks worse after the tune (the same or better: nothing lost)
    same = [q for q in before if all(rank(after[q][m]) <= rank(before[q][m]) for m in before[q])]
    assert lost, "the tiny tune moved no question out of the vector top 5: nothing to refuse"
    assert same, "the tiny tune ranked every question worse somewhere: nothing to activate on"
    every = json.loads(candidates.read_text())

    losing = _write(tmp_path / "losing.json", [q for q in every if q["id"] in lost])
    refused = tune(settings, PLAIN, OPTIONS, question_files=[losing])
    assert not refused.trained  # the same request: the model is not trained again
    assert not refused.activated
    assert refused.sets[0].findings and "vector" in " ".join(refused.sets[0].findings)
    assert "loses on losing" in refused.verdict
    assert _models(settings) == {base: (True, 0), tuned: (False, 0)}

    # --activate: the gate still runs and reports its loss, the model is activated anyway
    forced = tune(settings, PLAIN, OPTIONS, question_files=[losing], force_activate=True)
    assert not forced.trained and forced.activated
    assert forced.sets[0].findings
    assert "loses on losing: activated as asked (--activate)" in forced.verdict
    assert _models(settings) == {base: (False, 0), tuned: (True, 0)}
    with connect(str(settings.database_url)) as conn:  # back, as a user would
        activate(conn, base, 32)
    assert _models(settings) == {base: (True, 0), tuned: (False, 0)}

    steady = _write(tmp_path / "steady.json", [q for q in every if q["id"] in same])
    accepted = tune(settings, PLAIN, OPTIONS, question_files=[steady])
    assert not accepted.trained and accepted.activated
    assert accepted.sets[0].passed
    assert _models(settings) == {base: (False, 0), tuned: (True, 0)}


def test_gate_questions_are_held_out_of_the_training_pairs(
    tiny_kb: Settings, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    title = conn.execute("SELECT title FROM kb.documents ORDER BY source_uri LIMIT 1").fetchone()
    conn.rollback()
    assert title is not None
    questions = _write(
        tmp_path / "q.json",
        [{"id": "t", "question": title[0] + "?", "kind": "exact", "sources": ["doc00.md"]}],
    )
    plain = tune(tiny_kb, PairSources(), ONE_STEP)
    held = tune(
        tiny_kb,
        PairSources(),
        ONE_STEP,
        question_files=[questions],
    )
    assert plain.held_out == 0
    assert held.held_out >= 1
    assert held.available == plain.available - held.held_out  # of the pairs built
    assert held.model != plain.model  # other pairs: another model


def test_interrupted_tune_leaves_the_active_model_and_resumes(tiny_kb: Settings) -> None:
    settings = tiny_kb
    base = settings.embedding_model
    events: list[tuple[str, dict[str, Any]]] = []

    def stop_at(event: str, step: int) -> Any:
        def progress(name: str, info: dict[str, Any]) -> None:
            events.append((name, info))
            if name == event and int(info.get("step", 1)) >= step:
                raise KeyboardInterrupt

        return progress

    with pytest.raises(KeyboardInterrupt):  # Ctrl-C while training, past a checkpoint
        tune(settings, PairSources(), OPTIONS, progress=stop_at("train-step", 11))
    assert _models(settings) == {base: (True, 0)}  # nothing registered
    folders = (settings.data_dir / "models").glob("*-tuned-*")
    assert [f.name for f in folders if not f.name.endswith(".partial")] == []  # no model yet

    events.clear()
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C while re-embedding
        tune(settings, PairSources(), OPTIONS, progress=stop_at("batch", 1))
    assert events[0] == (
        "train-start",
        {"steps": 12, "pairs": events[0][1]["pairs"], "resume": True},
    )
    models = _models(settings)
    assert models[base] == (True, 0)
    tuned = next(name for name in models if name != base)
    assert not models[tuned][0] and models[tuned][1] > 0  # registered, half filled, inactive
    result = CliRunner().invoke(
        cli,
        ["search", "vacuum table rows", "--json"],
        env={
            "PGKB_DATABASE_URL": str(settings.database_url),
            "PGKB_DATA_DIR": str(settings.data_dir),
            "PGKB_EMBEDDING_MODEL": base,
            "PGKB_EMBEDDING_DIMS": "32",
            "PGKB_CHUNK_OVERLAP": "0",
        },
    )
    assert result.exit_code == 0, result.output  # the active model still serves
    assert json.loads(result.stdout)

    # the same request through the command line: resumes the re-embedding, trains nothing
    env = {
        "PGKB_DATABASE_URL": str(settings.database_url),
        "PGKB_DATA_DIR": str(settings.data_dir),
        "PGKB_EMBEDDING_MODEL": base,
        "PGKB_EMBEDDING_DIMS": "32",
        "PGKB_EMBEDDING_BATCH_SIZE": "4",
        "PGKB_CHUNK_OVERLAP": "0",
    }
    args = ["models", "tune", "--epochs", "3", "--max-steps", "12", "--batch-size", "8"]
    args += ["--learning-rate", "5e-3", "--max-seq-length", "32", "--seed", "0"]
    result = CliRunner().invoke(cli, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    finished = json.loads(result.stdout)
    assert not finished["trained"] and finished["model"] == tuned
    assert finished["reembed"]["embedded"] == models[tuned][1]
    assert not finished["activated"] and "no question set" in finished["verdict"]
    assert _models(settings) == {base: (True, 0), tuned: (False, 0)}
    again = CliRunner().invoke(cli, args, env=env)
    assert again.exit_code == 0, again.output
    assert f"{tuned}: no question set to gate it" in again.stdout
    assert _models(settings) == {base: (True, 0), tuned: (False, 0)}
    forced = CliRunner().invoke(cli, [*args, "--activate"], env=env)
    assert forced.exit_code == 0, forced.output
    assert f"{tuned}: no question set to gate it (--questions FILE): activated as asked" in (
        forced.stdout
    )
    assert _models(settings) == {base: (False, 0), tuned: (True, 0)}


def _env(settings: Settings) -> dict[str, str]:
    return {
        "PGKB_DATABASE_URL": str(settings.database_url),
        "PGKB_DATA_DIR": str(settings.data_dir),
        "PGKB_EMBEDDING_PROVIDER": "local",
        "PGKB_EMBEDDING_MODEL": settings.embedding_model,
        "PGKB_EMBEDDING_DIMS": "32",
        "PGKB_EMBEDDING_BATCH_SIZE": "1",  # one commit per chunk: a long re-embedding
        "PGKB_CHUNK_OVERLAP": "0",
    }


def _searches(env: dict[str, str]) -> list[Any]:
    """What pgkb search answers (chunks, scores) for a few questions, by hybrid and vector."""
    found = []
    for query in ("vacuum table rows", "btree range index", "backup restore wal"):
        for mode in ("hybrid", "vector"):
            result = CliRunner().invoke(cli, ["search", query, "--mode", mode, "--json"], env=env)
            assert result.exit_code == 0, result.output
            found.append(json.loads(result.stdout))
    assert any(found)
    return found


def _run_until(
    args: list[str],
    env: dict[str, str],
    log: Path,
    ready: Callable[[], bool],
    stop: signal.Signals,
) -> int:
    """Run ``pgkb models tune ARGS`` in its own process and send it ``stop`` once ``ready()``
    holds; its exit code. The process starts with SIGINT's default action, as from a terminal: a
    suite started in the background by a shell without job control inherits SIGINT ignored, and
    Python then leaves it ignored (the Ctrl-C would go unseen)."""
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "models", "tune", *args],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while process.poll() is None and time.monotonic() < deadline and not ready():
            time.sleep(0.05)
        assert process.poll() is None, "the tune ended before the kill point: " + log.read_text()
        process.send_signal(stop)
        return process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_killed_tune_leaves_the_active_model_serving(db_url: str, tmp_path: Path) -> None:
    """A real ``pgkb models tune`` process stopped by Ctrl-C (SIGINT) and killed (SIGKILL) while
    it trains, and killed while it embeds the chunks with the tuned model: every search after
    each answers exactly as before the tune, with the base model's vectors."""
    settings = _tiny_kb(db_url, tmp_path, 100)  # a re-embedding long enough to be killed in
    base = settings.embedding_model
    env = _env(settings)
    before = _searches(env)
    log = tmp_path / "tune.log"
    long = ["--epochs", "100", "--max-steps", "5000", "--batch-size", "8", "--max-seq-length", "32"]

    def training() -> bool:
        return "training: step 50 of" in log.read_text()

    code = _run_until(long, env, log, training, signal.SIGINT)  # Ctrl-C while training
    text = log.read_text()
    assert code == 130, text
    assert "interrupted: the active model still serves every search" in text
    assert "Traceback" not in text
    assert _models(settings) == {base: (True, 0)}
    assert _searches(env) == before

    code = _run_until(long, env, log, training, signal.SIGKILL)  # kill -9 while training
    assert code == -signal.SIGKILL
    assert _models(settings) == {base: (True, 0)}
    assert _searches(env) == before

    def embedding() -> bool:
        with connect(str(settings.database_url)) as conn:
            row = conn.execute(
                "SELECT bool_or(NOT is_active AND embeddings > 0 AND missing > 0) FROM kb.models()"
            ).fetchone()
        return bool(row and row[0])

    short = ["--max-steps", "2", "--batch-size", "8", "--max-seq-length", "32"]
    code = _run_until(short, env, log, embedding, signal.SIGKILL)  # kill -9 while re-embedding
    assert code == -signal.SIGKILL
    models = _models(settings)
    assert models[base] == (True, 0) and len(models) == 2
    assert _searches(env) == before


def test_tune_command_errors(cli_env: dict[str, str]) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["models", "tune", "--qrels", "x.tsv"], env=cli_env)
    assert result.exit_code == 2 and "--qrels needs --beir" in result.output
    result = runner.invoke(cli, ["models", "tune", "--no-structure"], env=cli_env)
    assert result.exit_code == 2 and "--no-structure leaves nothing" in result.output
    result = runner.invoke(cli, ["models", "tune", "--questions", "missing.json"], env=cli_env)
    assert result.exit_code == 2 and "missing.json does not exist" in result.output
    assert "Traceback" not in result.output


TUNE_ARGS = ["--epochs", "3", "--max-steps", "12", "--batch-size", "8", "--learning-rate",
             "5e-3", "--max-seq-length", "32", "--seed", "0", "--no-hard-negatives"]  # fmt: skip
"""OPTIONS as command-line flags (in-batch negatives only: the tiny model trains in seconds)."""


def _tune_process(env: dict[str, str], args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``pgkb models tune ARGS`` as its own process, stderr to ``log``."""
    with open(log, "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "models", "tune",
             *args],
            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip


def test_a_checkpoint_broken_by_a_kill_while_saving_is_discarded_and_the_tune_completes(
    tiny_kb: Settings, tmp_path: Path
) -> None:
    """A run stopped past its checkpoint, then the checkpoint left as a kill in the middle of
    its save leaves it (its trainer state cut short, its optimizer state not written yet), and
    the request file cut short too: before, every rerun ended in a traceback until the
    ``.partial`` folder was deleted by hand."""
    settings = tiny_kb

    def stop_at_step(name: str, info: dict[str, Any]) -> None:
        if name == "train-step" and int(info["step"]) >= 11:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # past the checkpoint of step 10
        tune(settings, PLAIN, OPTIONS, progress=stop_at_step)
    (work,) = (settings.data_dir / "models").glob("*-tuned-*.partial")
    (checkpoint,) = (work / "checkpoints").glob("checkpoint-*")
    state = checkpoint / "trainer_state.json"
    state.write_bytes(state.read_bytes()[:40])  # what a kill mid-save leaves
    (checkpoint / "optimizer.pt").unlink()
    (checkpoint / "pgkb-complete").unlink()  # a checkpoint is marked complete once whole
    env = {**_env(settings), "PGKB_EMBEDDING_BATCH_SIZE": "4"}
    log = tmp_path / "rerun.log"
    rerun = _tune_process(env, [*TUNE_ARGS, "--json"], log)
    assert rerun.wait(timeout=600) == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text
    assert f"{checkpoint.name}" in text and "discarded" in text, text  # said, not silent
    assert not work.exists()
    assert len(_models(settings)) == 2  # trained, registered

    # the request file cut short by a kill: discarded with a line, the tune completes
    stopped = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        tune(settings, PLAIN, OPTIONS, progress=stop_at_step, output=stopped)
    request = stopped.with_name("stopped.partial") / "request.json"
    request.write_text(request.read_text()[:5])
    log2 = tmp_path / "rerun2.log"
    rerun = _tune_process(env, [*TUNE_ARGS, "--output", str(stopped)], log2)
    assert rerun.wait(timeout=600) == 0, log2.read_text()
    assert "Traceback" not in log2.read_text() and "discarded" in log2.read_text()
    assert (stopped / PROVENANCE).is_file()


def test_a_second_tune_at_once_is_refused(tiny_kb: Settings, tmp_path: Path) -> None:
    """Two ``pgkb models tune`` processes at once on one data folder: before, both trained into
    the same ``.partial`` folder and one of them crashed."""
    env = _env(tiny_kb)
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    long = ["--epochs", "100", "--max-steps", "5000", "--batch-size", "8", "--max-seq-length",
            "32", "--no-hard-negatives"]  # fmt: skip
    first = _tune_process(env, long, first_log)
    try:
        deadline = time.monotonic() + 300
        while "training: step" not in first_log.read_text():
            assert first.poll() is None, first_log.read_text()
            assert time.monotonic() < deadline, first_log.read_text()
            time.sleep(0.1)
        second = _tune_process(env, long, second_log)
        try:
            assert second.wait(timeout=120) == 2, second_log.read_text()
        finally:
            if second.poll() is None:  # before the fix it trained along
                second.kill()
                second.wait()
        text = second_log.read_text()
        assert "another pgkb models tune is running" in text and "Traceback" not in text
        assert first.poll() is None  # the first one goes on
    finally:
        first.kill()
        first.wait()
