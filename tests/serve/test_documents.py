"""Documents written by services and agents: ``/v1/documents`` on ``pgkb serve`` (real uvicorn on
127.0.0.1, httpx as the client) and ``pgkb mcp --allow-writes``' tools (the SDK's client), as a
real LOGIN role granted ``pgkb db grant ROLE --write --collection hr``; the queue processed by a
:class:`~loader.ingest.jobs.Worker` as the owner, then searched through the server.

Checked: a document posted as JSON and one uploaded as a file are searchable after the worker;
the same content twice is the same job; the list and one job; PUT replaces and DELETE removes;
the read token (and a server without a writing token) gets 403 and nothing is written; the
database refuses another collection (403); bad fields 400, unknown ids 404, too large 413;
``/metrics`` shows the queue; ``--worker`` processes the queue in the server; the MCP write
tools are absent by default, present with ``writable`` collections, refuse others, and mark what
an agent wrote with ``"origin": "mcp"``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from loader.cli import cli
from loader.errors import ConfigError
from loader.ingest.jobs import Worker
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, uvicorn_thread
from tests.serve_fixtures import PASSWORD, role_url

READ = "read-token-1"
WRITE = "write-token-2"
POLICY = "# Travel policy\n\nBook trains for journeys under four hours. Hotels up to 150 EUR.\n"
EXPENSES = (
    b"<html><head><title>Expenses</title></head><body><h1>Expenses</h1>"
    b"<p>Receipts go to the finance team within 30 days.</p></body></html>"
)


@pytest.fixture
def writer_url(pg_url: str, db_url: str, tmp_path: Path) -> Iterator[str]:
    """A LOGIN role that reads and writes collection hr (``pgkb db grant --write --collection
    hr``); collections hr and eng exist."""
    name = f"hr_svc_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(PASSWORD)
            )
        )
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute("INSERT INTO kb.collections (name) VALUES ('hr'), ('eng')")
    env = {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path / "data")}
    granted = CliRunner().invoke(
        cli, ["db", "grant", name, "--write", "--collection", "hr"], env=env
    )
    assert granted.exit_code == 0, granted.output
    try:
        yield role_url(db_url, name)
    finally:
        dbname = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            with psycopg.connect(
                psycopg.conninfo.make_conninfo(pg_url, dbname=dbname), autocommit=True
            ) as owner:
                owner.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def owner_settings(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> Settings:
    return ingest_settings(db_url, tmp_path, fake_openai, worker_poll_seconds=0.2)


@contextmanager
def serving(settings: Settings, **options: Any) -> Iterator[tuple[str, Any]]:
    """``pgkb serve``'s app as ``settings``' role on uvicorn: its base URL and its service."""
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(settings, pool_size=2).open()
    app = create_app(service, **{"token": READ, "write_token": WRITE, "max_body": 64_000,
                                 **options})  # fmt: skip
    with uvicorn_thread(app) as port:
        yield f"http://127.0.0.1:{port}", service


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _jobs(db_url: str) -> int:
    with psycopg.connect(db_url) as owner:
        row = owner.execute("SELECT count(*) FROM kb.document_jobs").fetchone()
    assert row is not None
    return int(row[0])


def _found(base: str, query: str) -> list[str]:
    response = httpx.post(
        base + "/v1/search", json={"query": query, "mode": "keyword"}, headers=_as(READ)
    )
    assert response.status_code == 200, response.text
    return [hit["source_uri"] for hit in response.json()["results"]]


def test_json_and_upload_processed_by_a_worker_then_found_listed_replaced_and_removed(
    writer_url: str, owner_settings: Settings
) -> None:
    settings = owner_settings.replace(database_url=writer_url)
    with serving(settings) as (base, _):
        posted = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "policies/travel.md", "content": POLICY, "collection": "hr",
                  "metadata": {"team": "hr"}, "category": "policy"},
            headers=_as(WRITE),
        )  # fmt: skip
        assert posted.status_code == 202, posted.text
        job = posted.json()
        assert job["state"] == "pending" and job["collection"] == "hr"
        assert job["source_uri"] == "policies/travel.md" and job["action"] == "put"
        again = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "policies/travel.md", "content": POLICY, "collection": "hr",
                  "metadata": {"team": "hr"}, "category": "policy"},
            headers=_as(WRITE),
        )  # fmt: skip
        assert again.status_code == 202 and again.json()["id"] == job["id"]
        uploaded = httpx.post(
            base + "/v1/documents",
            data={"collection": "hr", "metadata": '{"team": "finance"}'},
            files={"file": ("expenses.html", EXPENSES, "text/html")},
            headers=_as(WRITE),
        )
        assert uploaded.status_code == 202, uploaded.text
        upload = uploaded.json()
        assert upload["source_uri"] == "expenses.html" and upload["mime_type"] == "text/html"

        pending = httpx.get(base + "/v1/documents?state=pending", headers=_as(READ)).json()
        assert {d["id"] for d in pending["documents"]} == {job["id"], upload["id"]}
        report = Worker(owner_settings).run(once=True)
        assert (report.ready, report.failed) == (2, 0)

        one = httpx.get(base + f"/v1/documents/{job['id']}", headers=_as(READ))
        assert one.status_code == 200, one.text
        done = one.json()
        assert done["state"] == "ready" and done["error"] is None
        assert done["title"] == "Travel policy" and done["chunks"] >= 1
        assert (
            httpx.get(base + f"/v1/documents/{upload['id']}", headers=_as(READ)).json()["title"]
            == "Expenses"
        )
        listed = httpx.get(base + "/v1/documents", headers=_as(READ)).json()["documents"]
        assert {d["id"] for d in listed} == {job["id"], upload["id"]}
        assert _found(base, "trains") == ["policies/travel.md"]
        assert _found(base, "receipts") == ["expenses.html"]

        # PUT replaces that job's document (same source, same collection)
        replaced = httpx.put(
            base + f"/v1/documents/{job['id']}",
            json={
                "content": POLICY.replace("Hotels", "Hostels"),
                "metadata": {"team": "hr"},
                "category": "policy",
            },
            headers=_as(WRITE),
        )
        assert replaced.status_code == 202, replaced.text
        assert replaced.json()["source_uri"] == "policies/travel.md"
        assert replaced.json()["id"] != job["id"]
        # DELETE removes the uploaded one
        removed = httpx.delete(base + f"/v1/documents/{upload['id']}", headers=_as(WRITE))
        assert removed.status_code == 202, removed.text
        assert removed.json()["action"] == "remove"
        report = Worker(owner_settings).run(once=True)
        assert (report.ready, report.removed, report.failed) == (1, 1, 0)
        assert _found(base, "hostels") == ["policies/travel.md"]
        assert _found(base, "hotels") == []
        assert _found(base, "receipts") == []
    with psycopg.connect(owner_settings.database_url or "") as owner:
        meta = owner.execute(
            "SELECT metadata, category FROM kb.documents WHERE source_uri = 'policies/travel.md'"
        ).fetchone()
    assert meta is not None and meta[0]["team"] == "hr" and meta[1] == "policy"


def test_the_read_token_and_a_server_without_a_writing_token_write_nothing(
    writer_url: str, owner_settings: Settings, db_url: str
) -> None:
    settings = owner_settings.replace(database_url=writer_url)
    unknown = str(uuid.uuid4())
    with serving(settings) as (base, _):
        for method, path, body in (
            ("POST", "/v1/documents", {"source_uri": "a.md", "content": POLICY,
                                       "collection": "hr"}),
            ("PUT", f"/v1/documents/{unknown}", {"content": POLICY}),
            ("DELETE", f"/v1/documents/{unknown}", None),
        ):  # fmt: skip
            response = httpx.request(method, base + path, json=body, headers=_as(READ))
            assert response.status_code == 403, (method, response.text)
            error = response.json()["error"]
            assert error["type"] == "permission_error" and "writing token" in error["message"]
        # an upload with the read token, too
        refused = httpx.post(
            base + "/v1/documents",
            data={"collection": "hr"},
            files={"file": ("e.html", EXPENSES, "text/html")},
            headers=_as(READ),
        )
        assert refused.status_code == 403, refused.text
        # no token at all: 401, as everywhere
        assert httpx.post(base + "/v1/documents", json={}).status_code == 401
    with serving(settings, write_token=None, token=None) as (base, _):
        response = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "a.md", "content": POLICY, "collection": "hr"},
            headers=_as(WRITE),
        )
        assert response.status_code == 403, response.text
        assert "--write-token" in response.json()["error"]["message"]
    assert _jobs(db_url) == 0


def test_the_database_decides_the_collection_and_errors_are_json(
    writer_url: str, owner_settings: Settings, db_url: str
) -> None:
    settings = owner_settings.replace(database_url=writer_url)
    with serving(settings, max_upload=4096) as (base, _):
        eng = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "a.md", "content": POLICY, "collection": "eng"},
            headers=_as(WRITE),
        )
        assert eng.status_code == 403, eng.text
        assert "may not write into collection 'eng'" in eng.json()["error"]["message"]
        for body, says in (
            ({"source_uri": "a.md", "content": 3, "collection": "hr"}, "content must be"),
            ({"source_uri": "a.md", "collection": "hr"}, "content"),
            ({"content": POLICY, "collection": "hr"}, "source_uri is required"),
            ({"source_uri": "a.md", "content": POLICY, "metadata": [1]}, "metadata must be"),
            ({"source_uri": "a.md", "content": POLICY, "bogus": 1}, "unknown field"),
            ({"url": "https://example.com/"}, "fetching a URL is not supported"),
        ):
            response = httpx.post(base + "/v1/documents", json=body, headers=_as(WRITE))
            assert response.status_code == 400, (body, response.text)
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and says in error["message"], error
        for method in ("GET", "DELETE"):
            missing = httpx.request(
                method, base + f"/v1/documents/{uuid.uuid4()}", headers=_as(WRITE)
            )
            assert missing.status_code == 404, missing.text
            assert missing.json()["error"]["type"] == "not_found"
        assert httpx.get(base + "/v1/documents/nope", headers=_as(READ)).status_code == 400
        assert httpx.get(base + "/v1/documents?state=lost", headers=_as(READ)).status_code == 400
        big = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "a.md", "content": "x" * 70_000, "collection": "hr"},
            headers=_as(WRITE),
        )
        assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
        upload = httpx.post(
            base + "/v1/documents",
            data={"collection": "hr"},
            files={"file": ("big.md", b"y" * 5000, "text/markdown")},
            headers=_as(WRITE),
        )
        assert upload.status_code == 413, upload.text
    assert _jobs(db_url) == 0
    # the database gone away: 503, as a read's
    with serving(settings) as (base, service):
        service.settings = settings.replace(database_url="postgresql://127.0.0.1:1/nowhere")
        down = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "a.md", "content": POLICY, "collection": "hr"},
            headers=_as(WRITE),
        )
        assert down.status_code == 503, down.text
        assert down.json()["error"]["type"] == "unavailable"


def test_metrics_show_the_queue_and_the_server_s_worker_processes_it(
    writer_url: str, owner_settings: Settings
) -> None:
    from loader.app.worker import BackgroundWorker

    settings = owner_settings.replace(database_url=writer_url)
    with serving(settings) as (base, _):
        posted = httpx.post(
            base + "/v1/documents",
            json={"source_uri": "travel.md", "content": POLICY, "collection": "hr"},
            headers=_as(WRITE),
        )
        assert posted.status_code == 202, posted.text
        text = httpx.get(base + "/metrics", headers=_as(READ)).text
        assert 'pgkb_document_jobs{state="pending"} 1.0' in text, text
        assert 'pgkb_document_jobs{state="failed"} 0.0' in text
        oldest = next(
            line for line in text.splitlines()
            if line.startswith("pgkb_document_jobs_oldest_pending_seconds ")
        )  # fmt: skip
        assert float(oldest.split()[1]) >= 0.0
        job_id = posted.json()["id"]

    # --worker: a role that may not take jobs is refused before the server starts
    with pytest.raises(ConfigError, match="may not take jobs from the write queue"):
        BackgroundWorker(settings).check()
    # the queue processed in the server's process, stopped at its shutdown
    worker = BackgroundWorker(owner_settings).check()
    with serving(settings, worker=worker) as (base, _):
        deadline = time.monotonic() + 60
        state = "pending"
        while state != "ready" and time.monotonic() < deadline:
            time.sleep(0.2)
            state = httpx.get(base + f"/v1/documents/{job_id}", headers=_as(READ)).json()["state"]
        assert state == "ready"
        assert worker.running
        text = httpx.get(base + "/metrics", headers=_as(READ)).text
        assert 'pgkb_document_jobs{state="pending"} 0.0' in text
        assert 'route="/v1/documents/{id}"' in text  # a job's path counts as its route
    assert not worker.running


def test_mcp_write_tools_absent_by_default_then_an_agent_note_added_and_found(
    writer_url: str, owner_settings: Settings
) -> None:
    from mcp import Client

    from loader.serve.mcp import build_server
    from loader.serve.service import KnowledgeService

    settings = owner_settings.replace(database_url=writer_url)
    service = KnowledgeService(settings, pool_size=2).open()

    async def session() -> None:
        async with Client(build_server(service)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "add_document" not in names and "remove_document" not in names
        async with Client(build_server(service, writable=("hr",))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            add, remove = tools["add_document"], tools["remove_document"]
            assert add.annotations is not None and add.annotations.read_only_hint is False
            assert add.annotations.destructive_hint is False
            assert remove.annotations is not None and remove.annotations.read_only_hint is False
            assert remove.annotations.destructive_hint is True
            added = await client.call_tool(
                "add_document",
                {"source_uri": "notes/standup.md", "metadata": {"topic": "standup"},
                 "content": "# Standup\n\nThe zeppelin launch moved to Thursday.\n"},
            )  # fmt: skip
            assert not added.is_error, added.content
            assert added.structured_content["state"] == "pending"
            assert added.structured_content["collection"] == "hr"
            other = await client.call_tool(
                "add_document", {"source_uri": "x.md", "content": "x", "collection": "eng"}
            )
            assert other.is_error
            text = " ".join(getattr(c, "text", "") for c in other.content)
            assert "may not write into collection 'eng'" in text and "hr" in text

            await anyio.to_thread.run_sync(lambda: Worker(owner_settings).run(once=True))
            found = await client.call_tool("search", {"query": "zeppelin", "mode": "keyword"})
            assert not found.is_error, found.content
            hits = found.structured_content["results"]
            assert [h["source_uri"] for h in hits] == ["notes/standup.md"]

            gone = await client.call_tool("remove_document", {"source_uri": "notes/standup.md"})
            assert not gone.is_error and gone.structured_content["action"] == "remove"

    try:
        anyio.run(session)
    finally:
        service.close()
    with psycopg.connect(owner_settings.database_url or "") as owner:
        row = owner.execute(
            "SELECT metadata FROM kb.documents WHERE source_uri = 'notes/standup.md'"
        ).fetchone()
    assert row is not None
    assert row[0]["origin"] == "mcp" and row[0]["topic"] == "standup"
