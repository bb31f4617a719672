"""A small knowledge base for the web interface's tests, and ``pgkb serve`` on it.

Two collections: ``handbook`` (an employee handbook: links and a mention between its pages)
and ``engineering`` (database notes), plus a hostile page in ``handbook`` whose title and body
hold HTML and script, and a file that fails to ingest (so the run log has a failure). Ingested
once per session with the real local model (the abstention gate needs real similarities for an
answer to be given); the chat model is ``tests/fake_openai.py``.

Servers (uvicorn on an ephemeral 127.0.0.1 port, in a thread):
``web_server``
    as a ``--read`` role that may read every collection, with a serve token and the chat model;
``scoped_server``
    as a ``--read`` role granted ``handbook`` only, no token, no chat model.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.serve.guard import server_config
from loader.settings import Settings, load_settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import create_database, drop_database, uvicorn_thread
from tests.serve_fixtures import _create_role, _drop_role, role_url

TOKEN = "web-token-0123456789abcdef"

HOSTILE_TITLE = '<script>window.__pwned = "title"</script><img src=x onerror="window.__pwned=1">'

HANDBOOK = {
    "equipment.md": "# Home office equipment budget\n\n"
    "Every employee who works from home may spend up to 600 EUR on furniture for their home "
    "workspace: a desk, an ergonomic chair and a monitor arm. The company covers the cost; "
    "submit the receipts to the finance team within 30 days.\n\n"
    "## Laptops\n\nThe IT team issues one laptop per employee and replaces it every three "
    "years.\n",
    "leave.md": "# Parental leave\n\n"
    "Parents receive sixteen weeks of paid parental leave after the birth or adoption of a "
    "child. Tell your manager eight weeks before the leave starts.\n\n"
    "See also the [equipment budget](equipment.md) for returning to work from home.\n",
    "travel.md": "# Business travel\n\n"
    "Book trains for journeys under four hours. Hotels up to 150 EUR a night are reimbursed; "
    "meals are paid by a daily allowance of 40 EUR. Travel during Parental leave is not "
    "reimbursed.\n",
    "hostile.html": "<html><head><title>"
    + HOSTILE_TITLE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    + "</title></head><body><h1>"
    + HOSTILE_TITLE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    + "</h1><p>Hostile &lt;script&gt;window.__pwned = &quot;body&quot;&lt;/script&gt; text "
    "about the furniture budget &lt;iframe src=&quot;javascript:window.__pwned=3&quot;&gt;"
    "&lt;/iframe&gt; and &lt;a href=&quot;javascript:alert(1)&quot;&gt;a link&lt;/a&gt;.</p>"
    "<p>More hostile text: &lt;svg onload=&quot;window.__pwned=4&quot;&gt;&lt;/svg&gt;.</p>"
    "</body></html>",
    "broken.pdf": "%PDF-1.4 this is not a PDF at all",
}

ENGINEERING = {
    "createindex.md": "# CREATE INDEX\n\n"
    "CREATE INDEX CONCURRENTLY builds an index without locking out writes: the table stays "
    "available for INSERT, UPDATE and DELETE while the index is built, at the cost of two "
    "table scans. A failed concurrent build leaves an INVALID index to drop.\n\n"
    "## Storage parameters\n\nfillfactor sets how full each index page is packed.\n",
    "vacuum.md": "# Routine vacuuming\n\n"
    "VACUUM reclaims the storage of dead tuples. Autovacuum runs it automatically; "
    "maintenance_work_mem bounds the memory it uses. See [CREATE INDEX](createindex.md).\n",
}


@dataclasses.dataclass(frozen=True)
class WebKb:
    settings: Settings
    url: str
    reader_url: str
    scoped_url: str
    fake: FakeOpenAI
    ids: dict[str, str]
    """Document id by file name."""

    def reader_settings(self, **more: Any) -> Settings:
        return dataclasses.replace(self.settings, database_url=self.reader_url, **more)


@pytest.fixture(scope="session")
def web_fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def web_kb(
    pg_url: str,
    template_db: str,
    embedder: Any,
    tmp_path_factory: Any,
    web_fake: FakeOpenAI,
) -> Iterator[WebKb]:
    from loader.ingest.pipeline import ingest_paths
    from loader.ops.roles import grant

    root: Path = tmp_path_factory.mktemp("web-docs")
    for name, docs in (("handbook", HANDBOOK), ("engineering", ENGINEERING)):
        (root / name).mkdir()
        for file, text in docs.items():
            (root / name / file).write_text(text)
    dbname = f"pgkb_web_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, dbname, template=template_db)
    settings = load_settings(
        env={}, database_url=url, data_dir=str(tmp_path_factory.mktemp("web-kb"))
    )
    reader, scoped = f"web_read_{uuid.uuid4().hex[:6]}", f"web_hr_{uuid.uuid4().hex[:6]}"
    try:
        for name, category in (("handbook", "hr"), ("engineering", "engineering")):
            report = ingest_paths(
                settings.replace(source_root=root), [root / name], category=category,
                embedder=embedder, collection=name,
            )  # fmt: skip
            expected = 1 if name == "handbook" else 0  # broken.pdf fails
            assert report.exit_code == expected, report.to_dict()
        for role in (reader, scoped):
            _create_role(pg_url, role)
        with psycopg.connect(url) as conn:
            grant(conn, reader, read=True, write=False)
            grant(conn, scoped, read=True, write=False, collections=["handbook"])
            ids = {
                row[0].rsplit("/", 1)[-1]: str(row[1])
                for row in conn.execute("SELECT source_uri, id FROM kb.documents")
            }
        yield WebKb(settings, url, role_url(url, reader), role_url(url, scoped), web_fake, ids)
    finally:
        drop_database(pg_url, dbname)
        for role in (reader, scoped):
            _drop_role(pg_url, role)


def start_server(app: Any) -> tuple[str, Any, threading.Thread]:
    """``app`` served in a thread with the configuration ``pgkb serve`` runs (``server_config``):
    its base URL, the uvicorn server (set ``should_exit`` to stop it) and the thread
    (``bench/web_pages.py``, in git at 92379dd, keeps a server running between steps)."""
    import uvicorn

    instance = uvicorn.Server(server_config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = instance.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", instance, thread


def _serve(settings: Settings, token: str | None) -> Iterator[str]:
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(settings, pool_size=3).open()
    app = create_app(service, token=token, concurrency=8)
    with uvicorn_thread(app) as port:  # the configuration pgkb serve runs, its Guard included
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def web_server(web_kb: WebKb) -> Iterator[str]:
    """Base URL of ``pgkb serve`` as the all-collections reader, with a token and a chat model."""
    settings = web_kb.reader_settings(
        chat_base_url=web_kb.fake.base_url,
        chat_model="fake-chat",
        chat_api_key="sk-test",
        chat_max_retries=0,
        chat_timeout=20.0,
    )
    yield from _serve(settings, TOKEN)


@pytest.fixture(scope="session")
def scoped_server(web_kb: WebKb) -> Iterator[str]:
    """Base URL of ``pgkb serve`` as a reader granted ``handbook`` only; no token."""
    yield from _serve(dataclasses.replace(web_kb.settings, database_url=web_kb.scoped_url), None)
