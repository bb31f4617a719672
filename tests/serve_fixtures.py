"""A small knowledge base for the servers' tests, ingested once per session with the real local
model, and LOGIN roles given ``pgkb db grant --read`` and ``--write``.

Two categories: ``handbook`` (an employee handbook) and ``engineering`` (database notes), so the
tests can check that a server scoped to one never shows the other. Test modules import the
fixtures by name (``tests/conftest.py`` loads this module as a plugin, so each session-scoped
fixture is made once per session, whichever modules use it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from loader.settings import Settings
from tests.helpers import create_database, drop_database, uvicorn_thread

PASSWORD = "serve-pw"

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
    "meals are paid by a daily allowance of 40 EUR.\n",
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
class ServeKb:
    settings: Settings
    """The owner's settings (the real local model)."""
    url: str
    reader: str
    reader_url: str
    writer: str
    writer_url: str
    pg_url: str
    dbname: str

    def as_reader(self) -> Settings:
        return dataclasses.replace(self.settings, database_url=self.reader_url)

    def env(self, url: str) -> dict[str, str]:
        return {"PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(self.settings.data_dir)}


def role_url(url: str, role: str) -> str:
    """``url`` logging in as ``role`` (a libpq DSN)."""
    return psycopg.conninfo.make_conninfo(url, user=role, password=PASSWORD)


def password_verifies(pg_url: str, role: str, password: str) -> bool:
    """Whether ``role``'s stored password (``pg_authid.rolpassword``, SCRAM-SHA-256 or md5) is
    ``password``: what a server that checks passwords would accept, shown even where the test
    server trusts local connections (the embedded one does)."""
    import base64
    import hashlib
    import hmac

    with psycopg.connect(pg_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)
        ).fetchone()
    stored = row[0] if row else None
    if not stored:
        return False
    if stored.startswith("md5"):
        return hmac.compare_digest(
            stored, "md5" + hashlib.md5((password + role).encode()).hexdigest()
        )
    scheme, _, rest = stored.partition("$")
    assert scheme == "SCRAM-SHA-256", stored[:20]
    params, _, keys = rest.partition("$")
    iterations, _, salt = params.partition(":")
    stored_key, _, _server_key = keys.partition(":")
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(salt), int(iterations)
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    return hmac.compare_digest(hashlib.sha256(client_key).digest(), base64.b64decode(stored_key))


def _create_role(pg_url: str, name: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(PASSWORD)
            )
        )


def _drop_role(pg_url: str, name: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def serve_kb(
    pg_url: str, template_db: str, embedder: Any, tmp_path_factory: Any
) -> Iterator[ServeKb]:
    from loader.ingest.pipeline import ingest_paths
    from loader.ops.roles import grant

    root: Path = tmp_path_factory.mktemp("serve-docs")
    for category, docs in (("handbook", HANDBOOK), ("engineering", ENGINEERING)):
        (root / category).mkdir()
        for name, text in docs.items():
            (root / category / name).write_text(text)
    name = f"pgkb_serve_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name, template=template_db)
    settings = Settings(database_url=url, data_dir=tmp_path_factory.mktemp("serve-kb"))
    reader, writer = f"svc_read_{uuid.uuid4().hex[:6]}", f"svc_write_{uuid.uuid4().hex[:6]}"
    try:
        for category in ("handbook", "engineering"):
            report = ingest_paths(
                settings.replace(source_root=root), [root / category], category=category,
                embedder=embedder,
            )  # fmt: skip
            assert report.exit_code == 0, report.to_dict()
        for role in (reader, writer):
            _create_role(pg_url, role)
        with psycopg.connect(url) as conn:
            grant(conn, reader, read=True, write=False, statement_timeout="10s")
            grant(conn, writer, read=False, write=True)
        yield ServeKb(
            settings, url, reader, role_url(url, reader), writer, role_url(url, writer),
            pg_url, name,
        )  # fmt: skip
    finally:
        drop_database(pg_url, name)
        for role in (reader, writer):
            _drop_role(pg_url, role)


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve the ASGI ``app`` as ``pgkb serve`` does (:func:`tests.helpers.uvicorn_thread`);
    yields its base URL and stops it (graceful shutdown) at the end."""
    with uvicorn_thread(app) as port:
        yield f"http://127.0.0.1:{port}"
