"""Faults: kill -9 of ``pgkb ingest`` at several points over a corpus being added to, changed and
pruned; readers querying while a loader replaces and prunes; a statement timeout mid-write.

After every fault, and after the re-run that follows it, every document is whole (chunks
0..n-1, one embedding of the active model each, no orphan rows), and after the final re-run
every document equals its source (a further run finds every file unchanged: the stored content
hash is the file's) and holds exactly its source's text.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI, Reply, Request, fake_vector
from tests.helpers import check_whole, ingest_settings, settings_env


def _orphans(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM kb.chunks c LEFT JOIN kb.documents d "
        "ON d.id = c.document_id WHERE d.id IS NULL), "
        "(SELECT count(*) FROM kb.embeddings e LEFT JOIN kb.chunks c ON c.id = e.chunk_id "
        "WHERE c.id IS NULL)"
    ).fetchone()
    conn.rollback()
    assert row is not None
    return int(row[0]), int(row[1])


def _write(root: Path, i: int, version: int) -> None:
    body = "\n\n".join(
        f"Document {i} version {version} paragraph {p} about topic {i * p + version}."
        for p in range(3)
    )
    (root / f"doc{i:02}.md").write_text(f"# Doc {i}\n\n{body}\n")


def _slow_embeddings(fake: FakeOpenAI, delay: float) -> None:
    def slow(request: Request) -> Reply:
        data = [
            {"object": "embedding", "index": n, "embedding": fake_vector(t, fake.dims)}
            for n, t in enumerate(request.body["input"])
        ]
        return Reply({"object": "list", "data": data, "model": "m"}, delay=delay)

    fake.script("/v1/embeddings", *[slow] * 2000)


def _kill_when(
    conn: psycopg.Connection[Any], process: subprocess.Popen[bytes], condition: str, log: Path
) -> None:
    """SIGKILL the run once ``condition`` (a SQL boolean) holds, or after 0.5 s when None."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        row = conn.execute(condition).fetchone()
        conn.rollback()
        if row and row[0]:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the kill point: " + log.read_text()
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def _start(root: Path, env: dict[str, str], log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "ingest", str(root),
             *extra],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )  # fmt: skip


def test_kill_9_at_several_points_loses_nothing(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(24):
        _write(root, i, 1)
    _slow_embeddings(fake_openai, 0.15)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    env = {**os.environ, **settings_env(settings), "PGKB_EMBEDDING_BATCH_SIZE": "2"}
    log = tmp_path / "ingest.log"
    kills = 0

    def crash(condition: str, *extra: str) -> None:
        nonlocal kills
        _kill_when(conn, _start(root, env, log, *extra), condition, log)
        kills += 1
        check_whole(conn)
        assert _orphans(conn) == (0, 0)

    # 1. the first run, killed while documents are being written
    crash("SELECT count(*) >= 2 FROM kb.documents")
    # 2. killed again, later in the same corpus
    crash("SELECT count(*) >= 10 FROM kb.documents")
    # 3. the corpus changes (edits, additions), killed after some replacements committed
    for i in range(0, 24, 3):
        _write(root, i, 2)
    for i in range(24, 30):
        _write(root, i, 1)
    crash("SELECT count(*) >= 2 FROM kb.documents WHERE title LIKE 'Doc%' AND EXISTS ("
          "SELECT 1 FROM kb.chunks c WHERE c.document_id = kb.documents.id "
          "AND c.content LIKE '%version 2%')")  # fmt: skip
    # 4. files deleted, a pruning run killed before it ends (the embedding is still slow)
    for i in range(20, 24):
        (root / f"doc{i:02}.md").unlink()
    for i in range(1, 24, 3):
        if (root / f"doc{i:02}.md").exists():
            _write(root, i, 3)
    crash("SELECT count(*) >= 1 FROM kb.chunks WHERE content LIKE '%version 3%'", "--prune")

    # the re-run completes, and every document now equals its source
    fake_openai.script("/v1/embeddings")  # back to instant answers
    report = ingest_paths(settings, [root], prune=True)
    assert report.exit_code == 0, report.to_dict()
    again = ingest_paths(settings, [root], prune=True)
    files = sorted(root.glob("*.md"))
    assert again.unchanged == len(files) and again.new == again.changed == again.pruned == 0
    check_whole(conn)
    assert _orphans(conn) == (0, 0)
    stored = dict(
        conn.execute(
            "SELECT d.source_uri, string_agg(c.content, ' ' ORDER BY c.chunk_index) "
            "FROM kb.documents d JOIN kb.chunks c ON c.document_id = d.id GROUP BY 1"
        ).fetchall()
    )
    conn.rollback()
    assert set(stored) == {str(f) for f in files}
    for path in files:
        source = path.read_text().split("\n", 2)[2]  # the text under the title heading
        assert "".join(stored[str(path)].split()) == "".join(source.split()), path
    assert kills == 4


def test_readers_never_see_a_half_replaced_or_deleted_document(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """Readers (as kb_reader) search in a loop while a loader rewrites every document several
    times and prunes some: no reader errors, every document a reader sees is of one version
    only, and once a prune has committed no reader sees the pruned documents again."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(12):
        _write(root, i, 1)
    settings = ingest_settings(db_url, tmp_path, fake_openai, chunk_tokens=20)
    ingest_paths(settings, [root])
    stop = threading.Event()
    pruned_at: dict[str, float] = {}
    problems: list[str] = []
    queries = [0]

    def reader() -> None:
        with psycopg.connect(db_url, autocommit=True) as rconn:
            rconn.execute("SET ROLE kb_reader")
            while not stop.is_set():
                started = time.monotonic()
                try:
                    rows = rconn.execute(
                        "SELECT source_uri, content FROM kb.hybrid_search("
                        "'document version paragraph topic', NULL, 50, keyword_candidates => 50)"
                    ).fetchall()
                except psycopg.Error as exc:
                    problems.append(f"reader error: {exc}")
                    return
                queries[0] += 1
                versions: dict[str, set[str]] = {}
                for uri, content in rows:
                    versions.setdefault(uri, set()).update(re.findall(r"version (\d+)", content))
                    gone = pruned_at.get(uri)
                    if gone is not None and started > gone:
                        problems.append(f"{uri} seen after it was pruned")
                for uri, seen in versions.items():
                    if len(seen) > 1:
                        problems.append(f"{uri} mixes versions {sorted(seen)}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for version in (2, 3, 4):
            for i in range(12):
                _write(root, i, version)
            assert ingest_paths(settings, [root]).changed == 12
        for i in (9, 10, 11):
            (root / f"doc{i:02}.md").unlink()
        report = ingest_paths(settings, [root], prune=True)
        assert report.pruned == 3
        done = time.monotonic()
        for i in (9, 10, 11):
            pruned_at[str(root / f"doc{i:02}.md")] = done
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not problems, problems[:5]
    assert queries[0] > 0
    check_whole(conn)
    assert _orphans(conn) == (0, 0)


@pytest.mark.parametrize("lock", ["kb.chunks"])
def test_a_statement_timeout_mid_write_leaves_no_partial_document(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    lock: str,
) -> None:
    from click.testing import CliRunner

    from loader.cli import cli

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(3):
        _write(root, i, 1)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    for i in range(3):
        _write(root, i, 2)
    before = conn.execute("SELECT source_uri, content_sha FROM kb.documents").fetchall()
    conn.rollback()
    blocker = psycopg.connect(db_url)
    try:
        blocker.execute(f"LOCK TABLE {lock} IN EXCLUSIVE MODE")  # writers wait, readers do not
        env = {**settings_env(settings), "PGOPTIONS": "-c statement_timeout=1500"}
        result = CliRunner().invoke(cli, ["ingest", str(root)], env=env)
    finally:
        blocker.rollback()
        blocker.close()
    assert result.exit_code == 2, result.output
    assert "statement timeout" in result.output
    assert "Traceback" not in result.output
    after = conn.execute("SELECT source_uri, content_sha FROM kb.documents").fetchall()
    conn.rollback()
    assert sorted(after) == sorted(before)  # the previous good state still serves
    check_whole(conn)
    report = ingest_paths(settings, [root])
    assert report.changed == 3 and report.exit_code == 0
    check_whole(conn)


def test_a_server_restart_mid_run_is_reported_and_the_next_run_completes(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """On a server of its own (the shared test server must stay up): stopped and started again
    while ``pgkb ingest`` writes. The run exits 2 with a one-line error, no traceback; every
    document committed before is whole; the next run completes."""
    import shutil
    import tempfile

    from loader.db.embedded import ensure_server, stop_server
    from tests.helpers import migrate

    top = Path(tempfile.mkdtemp(prefix="pgkb-restart-test-"))
    pgdata = top / "pgdata"
    try:
        url = ensure_server(pgdata)
        migrate(url)
        root = tmp_path / "docs"
        root.mkdir()
        for i in range(20):
            _write(root, i, 1)
        _slow_embeddings(fake_openai, 0.15)
        settings = ingest_settings(url, tmp_path, fake_openai)
        env = {**os.environ, **settings_env(settings), "PGKB_EMBEDDING_BATCH_SIZE": "2"}
        log = tmp_path / "ingest.log"
        process = _start(root, env, log)
        with psycopg.connect(url) as watcher:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                row = watcher.execute("SELECT count(*) FROM kb.documents").fetchone()
                watcher.rollback()
                if row and row[0] >= 2:
                    break
                time.sleep(0.02)
        assert process.poll() is None, log.read_text()
        stop_server(pgdata)
        url = ensure_server(pgdata)
        assert process.wait(timeout=180) == 2, log.read_text()
        output = log.read_text()
        assert "Error:" in output and "Traceback" not in output, output
        with psycopg.connect(url) as conn:
            check_whole(conn)
            assert _orphans(conn) == (0, 0)
            fake_openai.script("/v1/embeddings")
            report = ingest_paths(settings.replace(database_url=url), [root])
            assert report.exit_code == 0
            assert report.new + report.unchanged == 20
            check_whole(conn)
            assert _orphans(conn) == (0, 0)
    finally:
        if (pgdata / "postmaster.pid").exists():
            stop_server(pgdata)
        shutil.rmtree(top, ignore_errors=True)


def _index_of(conn: psycopg.Connection[Any], name: str) -> str | None:
    row = conn.execute("SELECT index_name FROM kb.models() WHERE name = %s", (name,)).fetchone()
    conn.rollback()
    assert row is not None, name
    return row[0]


def test_a_killed_reembed_leaves_no_model_without_its_index(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """kill -9 of `pgkb models reembed` mid bulk load (its model's HNSW index dropped, not yet
    built again): `models activate` refuses the model, saying why and what builds the index; the
    resumed run builds it before it exits 0; and a killed ingest's index is built again by the
    next `pgkb ingest`, even one with nothing to change."""
    from click.testing import CliRunner

    from loader.cli import cli

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(12):
        _write(root, i, 1)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    env = {**os.environ, **settings_env(settings), "PGKB_HNSW_BULK_THRESHOLD": "1"}
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli, list(args), env=env, catch_exceptions=False)

    added = run(
        "models", "add", "second", "--dims", "8", "--provider", "openai",
        "--base-url", fake_openai.base_url,
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert _index_of(conn, "second") is not None  # registered with its index
    _slow_embeddings(fake_openai, 0.3)
    log = tmp_path / "reembed.log"
    with open(log, "ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "models",
             "reembed", "--model", "second", "--batch-size", "2"],
            env=env, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    _kill_when(
        conn,
        process,
        "SELECT index_name IS NULL AND embeddings >= 4 FROM kb.models() WHERE name = 'second'",
        log,
    )
    assert process.wait(timeout=60) == -signal.SIGKILL
    assert _index_of(conn, "second") is None  # what the kill left

    fake_openai.script("/v1/embeddings")  # fast again
    resumed = run("models", "reembed", "--model", "second", "--json")
    assert resumed.exit_code == 0, resumed.output
    report = json.loads(resumed.stdout)
    assert report["remaining"] == 0 and report["index_rebuilt"] is True
    assert _index_of(conn, "second") is not None
    again = run("models", "reembed", "--model", "second", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["index_rebuilt"] is False

    # killed while building the index, every vector stored: activating it is refused, and the
    # resumed run, with nothing to embed, builds the index
    conn.execute("SELECT kb.drop_model_index(id) FROM kb.embedding_models WHERE name = 'second'")
    conn.commit()
    assert _index_of(conn, "second") is None
    refused = run("models", "activate", "second")
    assert refused.exit_code != 0
    assert "HNSW index" in refused.stderr
    assert "pgkb models reembed --model second" in refused.stderr
    active = conn.execute("SELECT name FROM kb.models() WHERE is_active").fetchone()
    conn.rollback()
    assert active == ("fake-embed",)
    rebuilt = run("models", "reembed", "--model", "second")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "built its missing HNSW index" in rebuilt.stdout
    assert _index_of(conn, "second") is not None
    assert run("models", "activate", "second").exit_code == 0

    # an ingest killed the same way: the next ingest, with nothing to change, builds it
    env["PGKB_EMBEDDING_MODEL"] = "second"
    env["PGKB_EMBEDDING_DIMS"] = "8"
    assert run("ingest", str(root)).exit_code == 0  # the documents as this model chunks them
    conn.execute("SELECT kb.drop_model_index(id) FROM kb.embedding_models WHERE name = 'second'")
    conn.commit()
    ingested = run("ingest", str(root), "--json")
    assert ingested.exit_code == 0, ingested.output
    assert json.loads(ingested.stdout)["unchanged"] == 12
    assert json.loads(ingested.stdout)["index_rebuilt"] is True
    assert _index_of(conn, "second") is not None
