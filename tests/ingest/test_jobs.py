"""Documents written by services: kb.submit_document / kb.submit_file / kb.remove_document from
SQL under a role's per-collection writing grant, and ``pgkb worker`` turning the queue into
chunks, embeddings and graph as ``pgkb ingest`` does: states, idempotence, a transient failure
retried, a permanent one failed with its reason, two workers sharing the queue, kill -9.

Embeddings come from the fake OpenAI-compatible server; roles are real LOGIN roles of the
test server, granted with ``pgkb db grant``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from loader.cli import cli
from loader.errors import SqlState
from loader.ingest.jobs import Worker
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import ingest_settings, raises_code, settings_env
from tests.serve_fixtures import PASSWORD, role_url

ROOT = Path(__file__).resolve().parents[2]

POLICY = "# Travel policy\n\nBook trains for journeys under four hours. Hotels up to 150 EUR.\n"


@pytest.fixture
def roles(pg_url: str, db_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A writer of collection hr and a reader of every collection, granted by pgkb db grant."""
    suffix = uuid.uuid4().hex[:6]
    names = {"writer": f"hr_writer_{suffix}", "reader": f"any_reader_{suffix}"}
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for name in names.values():
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(name), sql.Literal(PASSWORD)
                )
            )
    env = {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path / "data")}
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute("INSERT INTO kb.collections (name) VALUES ('hr'), ('eng')")
    runner = CliRunner()
    granted = runner.invoke(
        cli, ["db", "grant", names["writer"], "--write", "--collection", "hr"], env=env
    )
    assert granted.exit_code == 0, granted.output
    assert "reads and writes collection hr" in granted.output
    granted = runner.invoke(cli, ["db", "grant", names["reader"], "--read"], env=env)
    assert granted.exit_code == 0, granted.output
    urls = {key: role_url(db_url, name) for key, name in names.items()}
    try:
        yield urls
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            for name in names.values():
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (name,),
                )
            dbname = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
            for name in names.values():
                with psycopg.connect(
                    psycopg.conninfo.make_conninfo(pg_url, dbname=dbname), autocommit=True
                ) as owner:
                    owner.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def worker_settings(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> Settings:
    return ingest_settings(
        db_url, tmp_path, fake_openai, worker_backoff_base=0.0, worker_poll_seconds=0.2
    )


def _submit(url: str, source: str, content: str, collection: str = "hr", **more: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT kb.submit_document(%s, %s, %s, %s, %s, %s)",
            (source, more.get("title"), content, psycopg.types.json.Jsonb(more.get("meta", {})),
             more.get("category"), collection),
        ).fetchone()  # fmt: skip
    assert row is not None
    return row[0]


def _job(url: str, job_id: Any) -> dict[str, Any]:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute("SELECT * FROM kb.document_jobs(NULL, 10, %s)", (job_id,)).fetchone()
    assert row is not None, job_id
    return dict(row)


def _keyword(url: str, text: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT source_uri FROM kb.keyword_search(%s, 5)", (text,)).fetchall()
    return [r[0] for r in rows]


def test_a_writer_submits_into_its_collection_only_and_a_reader_cannot_write(
    roles: dict[str, str], db_url: str
) -> None:
    job = _submit(roles["writer"], "policies/travel.md", POLICY)
    assert _job(db_url, job)["state"] == "pending"
    # the same document again changes nothing: the same job
    assert _submit(roles["writer"], "policies/travel.md", POLICY) == job
    for url, collection in ((roles["writer"], "eng"), (roles["reader"], "hr")):
        with psycopg.connect(url) as conn:
            with raises_code(SqlState.COLLECTION_NOT_WRITABLE, match="may not write"):
                conn.execute(
                    "SELECT kb.submit_document('x.md', 'X', 'text', '{}', NULL, %s)", (collection,)
                )
            conn.rollback()
            with raises_code(SqlState.COLLECTION_NOT_WRITABLE):
                conn.execute("SELECT kb.remove_document('policies/travel.md', %s)", (collection,))
            conn.rollback()
            # and no table of the queue is reachable directly
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("INSERT INTO kb.document_jobs (action, collection, source_uri, "
                             "content_sha) VALUES ('remove', 'hr', 'x', 'x')")  # fmt: skip
    # nothing was recorded by the refused calls
    with psycopg.connect(db_url) as owner:
        assert owner.execute("SELECT count(*) FROM kb.document_jobs").fetchone() == (1,)
    # a removal of a document that does not exist (nor is pending) says so
    with psycopg.connect(roles["writer"]) as conn, raises_code(SqlState.NOT_FOUND):
        conn.execute("SELECT kb.remove_document('nope.md', 'hr')")
    # the reader sees the job's state (it reads every collection), never its text
    seen = _job(roles["reader"], job)
    assert seen["source_uri"] == "policies/travel.md" and "content" not in seen


def test_the_worker_makes_a_submitted_document_searchable_then_replaces_and_removes_it(
    roles: dict[str, str], db_url: str, worker_settings: Settings
) -> None:
    job = _submit(roles["writer"], "policies/travel.md", POLICY, meta={"team": "hr"})
    report = Worker(worker_settings).run(once=True)
    assert (report.ready, report.failed) == (1, 0)
    done = _job(db_url, job)
    assert done["state"] == "ready" and done["attempts"] == 1 and done["chunks"] >= 1
    assert done["title"] == "Travel policy"
    assert _keyword(db_url, "trains") == ["policies/travel.md"]
    with psycopg.connect(db_url) as owner:
        meta = owner.execute(
            "SELECT metadata, collection FROM kb.documents WHERE source_uri = 'policies/travel.md'"
        ).fetchone()
        runs = owner.execute(
            "SELECT count(*) FROM kb.ingest_runs WHERE paths[1] LIKE %s", (f"job:{job}%",)
        ).fetchone()
    assert meta is not None and meta[0]["team"] == "hr" and meta[1] == "hr"
    assert meta[0]["submitted_by"].startswith("hr_writer_")
    assert runs == (1,)
    # changed text replaces it; the old words are gone
    changed = _submit(roles["writer"], "policies/travel.md", POLICY.replace("Hotels", "Hostels"))
    assert changed != job
    Worker(worker_settings).run(once=True)
    assert _job(db_url, changed)["state"] == "ready"
    assert _keyword(db_url, "hostels") == ["policies/travel.md"]
    assert _keyword(db_url, "hotels") == []
    # removed
    with psycopg.connect(roles["writer"], autocommit=True) as conn:
        removal = conn.execute("SELECT kb.remove_document('policies/travel.md', 'hr')").fetchone()
    assert removal is not None
    report = Worker(worker_settings).run(once=True)
    assert report.removed == 1
    assert _job(db_url, removal[0])["state"] == "ready"
    assert _keyword(db_url, "trains") == []


def test_a_file_is_extracted_by_its_type_and_an_unreadable_one_fails_with_its_reason(
    db_url: str, worker_settings: Settings
) -> None:
    html = b"<html><head><title>Expenses</title></head><body><h1>Expenses</h1>" + (
        b"<p>Receipts go to finance within 30 days.</p></body></html>"
    )
    with psycopg.connect(db_url, autocommit=True) as owner:
        good = owner.execute(
            "SELECT kb.submit_file('web/expenses.html', %s, 'text/html')", (html,)
        ).fetchone()
        bad = owner.execute(
            "SELECT kb.submit_file('bin/archive.zip', %s, 'application/zip')", (b"PK\x03\x04",)
        ).fetchone()
    assert good is not None and bad is not None
    report = Worker(worker_settings).run(once=True)
    assert (report.ready, report.failed) == (1, 1)
    assert _job(db_url, good[0])["title"] == "Expenses"
    assert _keyword(db_url, "receipts") == ["web/expenses.html"]
    failed = _job(db_url, bad[0])
    assert failed["state"] == "failed" and "unsupported" in failed["error"]
    # the CLI lists it with its reason
    runner = CliRunner()
    listed = runner.invoke(
        cli, ["docs", "list", "--state", "failed"], env=settings_env(worker_settings)
    )
    assert listed.exit_code == 0, listed.output
    assert "bin/archive.zip" in listed.stdout and "unsupported" in listed.stdout


def test_a_transient_failure_is_retried_and_then_succeeds(
    db_url: str, worker_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("/v1/embeddings", Reply(status=503, body={"error": {"message": "busy"}}))
    with psycopg.connect(db_url, autocommit=True) as owner:
        job = owner.execute("SELECT kb.submit_document('a.md', 'A', %s)", (POLICY,)).fetchone()
    assert job is not None
    settings = worker_settings.replace(worker_backoff_base=1.0)
    first = Worker(settings).run(once=True)
    assert first.retried == 1 and first.ready == 0
    state = _job(db_url, job[0])
    assert state["state"] == "pending" and state["attempts"] == 1 and "503" in state["error"]
    assert state["run_after"] > state["submitted_at"]  # not before its backoff
    deadline = time.monotonic() + 30
    second = Worker(settings).run(once=True)  # the server answers again, after the backoff
    while second.ready == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        second = Worker(settings).run(once=True)
    assert second.ready == 1
    assert _job(db_url, job[0])["state"] == "ready"


def test_two_workers_share_the_queue_and_do_each_document_once(
    db_url: str, worker_settings: Settings
) -> None:
    with psycopg.connect(db_url, autocommit=True) as owner:
        for i in range(12):
            owner.execute(
                "SELECT kb.submit_document(%s, NULL, %s)",
                (f"notes/{i}.md", f"# Note {i}\n\nNote number {i} about topic{i}.\n"),
            )
    reports = []

    def run() -> None:
        reports.append(Worker(worker_settings).run(once=True))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert sum(r.ready for r in reports) == 12 and sum(r.lost for r in reports) == 0
    with psycopg.connect(db_url) as owner:
        attempts = owner.execute("SELECT attempts, state FROM kb.document_jobs").fetchall()
        runs = owner.execute("SELECT count(*) FROM kb.ingest_runs").fetchone()
    assert attempts == [(1, "ready")] * 12
    assert runs == (12,)


def test_a_worker_killed_mid_job_loses_nothing(
    db_url: str, worker_settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """kill -9 while the job is processing (its embeddings request held by the server): the
    job comes back after its lease and the next worker finishes it."""
    gate = threading.Event()

    def slow(request: Any) -> Reply:
        gate.wait(60)
        return Reply(status=503, body={"error": {"message": "late"}})

    fake_openai.script("/v1/embeddings", slow)
    with psycopg.connect(db_url, autocommit=True) as owner:
        job = owner.execute("SELECT kb.submit_document('k.md', 'K', %s)", (POLICY,)).fetchone()
    assert job is not None
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        **settings_env(worker_settings),
        "PGKB_WORKER_LEASE_SECONDS": "10",
        "PGKB_EMBEDDING_TIMEOUT": "120",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", "from loader.cli import main; main()", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while _job(db_url, job[0])["state"] != "processing":
            assert time.monotonic() < deadline, "the worker never took the job"
            assert process.poll() is None, "the worker exited"
            time.sleep(0.2)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        gate.set()
        if process.poll() is None:
            process.kill()
    assert _job(db_url, job[0])["state"] == "processing"  # held by a dead worker
    settings = worker_settings.replace(worker_lease_seconds=10)
    deadline = time.monotonic() + 60
    report = Worker(settings).run(once=True)
    while report.ready == 0 and time.monotonic() < deadline:
        time.sleep(1)  # until the dead worker's lease runs out
        report = Worker(settings).run(once=True)
    assert report.ready == 1
    done = _job(db_url, job[0])
    assert done["state"] == "ready" and done["attempts"] >= 2, (done, report)
    assert _keyword(db_url, "trains") == ["k.md"]


def test_the_core_submits_as_the_callers_role_and_words_a_refusal(
    roles: dict[str, str], worker_settings: Settings
) -> None:
    from loader.app import Forbidden, JobsRequest, KnowledgeBase, RemoveRequest, SubmitRequest

    writer = KnowledgeBase(worker_settings.replace(database_url=roles["writer"]))
    job = writer.submit(SubmitRequest("notes/a.md", content=POLICY, collection="hr"))
    assert job.state == "pending" and job.collection == "hr"
    again = writer.submit(SubmitRequest("notes/a.md", content=POLICY, collection="hr"))
    assert again.id == job.id
    with pytest.raises(Forbidden, match="may not write into collection 'eng'"):
        writer.submit(SubmitRequest("notes/b.md", content=POLICY, collection="eng"))
    reader = KnowledgeBase(worker_settings.replace(database_url=roles["reader"]))
    with pytest.raises(Forbidden):
        reader.remove(RemoveRequest("notes/a.md", collection="hr"))
    Worker(worker_settings).run(once=True)
    (ready,) = reader.jobs(JobsRequest(job_id=str(job.id)))
    assert ready.state == "ready" and ready.chunks >= 1
