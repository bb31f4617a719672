"""The real commands as processes, as the guides tell a user to run them, and a knowledge base
of two collections for them.

Helpers: :func:`pgkb` (the ``pgkb`` console script pip installed next to this Python, else
``python -c``), :func:`run_pgkb` (a command to its end), :class:`Served` (``pgkb serve`` on an
ephemeral port, read from uvicorn's start line, stopped with SIGTERM), :func:`process_env` (the
environment of a child: none of the developer's ``PGKB_*`` or configuration).

Fixtures (``tests/conftest.py`` loads this module as a plugin, so each is made once per
session): ``coll_kb``, two collections ``hr`` and ``eng`` holding the same ``readme.md``,
ingested through a fake embeddings server (deterministic vectors: no model to load in the
children), with a LOGIN role granted ``--read`` (every collection) and one granted ``--read
--collection hr``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import httpx
import psycopg
import pytest

from loader.settings import Settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import create_database, drop_database, ingest_settings, settings_env
from tests.serve_fixtures import _create_role, _drop_role, role_url

ROOT = Path(__file__).resolve().parents[1]

HR = {
    "leave.md": "# Parental leave\n\nParents receive sixteen weeks of paid parental leave. Tell "
    "your manager eight weeks before the leave starts; every policy is on the intranet.\n",
    "readme.md": "# HR readme\n\nAsk the people team about any policy, leave or travel.\n",
}
ENG = {
    "createindex.md": "# CREATE INDEX\n\nCREATE INDEX CONCURRENTLY builds an index on a "
    "zanzibarite table without locking out writes.\n",
    "readme.md": "# Engineering readme\n\nDeploy the quokka-flux service; the policy index is "
    "in the wiki.\n",
}
ENG_MARKERS = ("zanzibarite", "quokka", "Engineering", "CREATE INDEX", "CONCURRENTLY")
"""Text only the eng collection holds."""
HR_TITLES = {"Parental leave", "HR readme"}
ENG_TITLES = {"CREATE INDEX", "Engineering readme"}


def pgkb(*args: str) -> list[str]:
    """The command line of ``pgkb ARGS``: the installed console script, as a user runs it."""
    script = Path(sys.executable).with_name("pgkb")
    if script.is_file():
        return [str(script), *args]
    return [sys.executable, "-c", "from loader.cli import main; main()", *args]


def process_env(pgkb_env: Mapping[str, str], home: Path) -> dict[str, str]:
    """A child's environment: this one without any ``PGKB_*`` or user configuration, then
    ``pgkb_env``. ``home`` holds its (empty) configuration folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGKB_")}
    env["XDG_CONFIG_HOME"] = str(home / "xdg-config")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env.update(pgkb_env)
    return env


def run_pgkb(
    args: list[str], env: Mapping[str, str], cwd: Path, *, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``pgkb ARGS`` run to its end in ``cwd`` (``env`` from :func:`process_env`)."""
    return subprocess.run(
        pgkb(*args),
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def wait_until(condition: Any, what: str, timeout: float = 60.0, every: float = 0.2) -> Any:
    """Poll ``condition()`` until it returns something true (returned), within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


class Served:
    """``pgkb serve ARGS --port 0`` (or another ``command``: ``mcp`` with ``--http``) as a
    process: its address is read from uvicorn's start line (``Uvicorn running on
    http://HOST:PORT``); stdout and stderr go to files (no pipe fills)."""

    def __init__(
        self,
        args: list[str],
        env: Mapping[str, str],
        folder: Path,
        *,
        start_timeout: float = 180,
        wait: bool = True,
        command: str = "serve",
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / f"{command}-{uuid.uuid4().hex[:6]}.log"
        self._out: IO[bytes] = self.log.open("wb")
        self.process = subprocess.Popen(
            pgkb(command, *args, "--port", "0"),
            env=dict(env),
            cwd=folder,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.start_timeout = start_timeout
        self.url = ""
        if wait:
            self.wait_ready()

    def wait_ready(self) -> Served:
        """Until the server listens (its URL is then :attr:`url`)."""
        try:
            self.url = wait_until(self._address, "pgkb serve to listen", self.start_timeout, 0.1)
        except BaseException:
            self.stop(signal.SIGKILL)
            raise
        return self

    def _address(self) -> str | None:
        found = re.search(r"Uvicorn running on (http://\S+)", self.output())
        if found:
            return found.group(1)
        assert self.process.poll() is None, f"pgkb serve exited:\n{self.output()}"
        return None

    def output(self) -> str:
        """What the process wrote so far (stdout and stderr)."""
        return self.log.read_text(errors="replace")

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(self.url + path, timeout=kwargs.pop("timeout", 60), **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, timeout=kwargs.pop("timeout", 60), **kwargs)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``sig`` and wait for the process's exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._out.close()
        return self.process.returncode


# --- a knowledge base of two collections ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CollKb:
    settings: Settings
    """The owner's settings (the fake embeddings server, 8 dimensions)."""
    url: str
    reader: str
    """Granted ``--read``: every collection."""
    hr_reader: str
    """Granted ``--read --collection hr``."""
    fake: FakeOpenAI
    """The session's fake embeddings server (its vectors are any FakeOpenAI's: the hash)."""
    pg_url: str
    dbname: str
    home: Path

    def role_url(self, role: str) -> str:
        return role_url(self.url, role)

    def env(self, url: str | None = None, **more: str) -> dict[str, str]:
        """A child's environment reading this knowledge base (as ``url``'s role)."""
        values = settings_env(self.settings)
        values["PGKB_DATABASE_URL"] = url or self.url
        return process_env({**values, **more}, self.home)

    def ids(self) -> dict[tuple[str, str], str]:
        """Document ids by (collection, file name)."""
        with psycopg.connect(self.url) as conn:
            rows = conn.execute("SELECT collection, source_uri, id FROM kb.documents").fetchall()
        return {(c, Path(s).name): str(i) for c, s, i in rows}


def ingest_collections(settings: Settings, root: Path) -> None:
    """``HR`` into collection hr and ``ENG`` into eng, each folder as its own source root."""
    from loader.ingest.pipeline import ingest_paths

    for folder, docs in (("hr", HR), ("eng", ENG)):
        (root / folder).mkdir(parents=True)
        for name, text in docs.items():
            (root / folder / name).write_text(text)
        report = ingest_paths(
            settings.replace(source_root=root / folder), [root / folder], collection=folder
        )
        assert report.exit_code == 0, report.to_dict()


@pytest.fixture(scope="session")
def coll_kb(pg_url: str, template_db: str, tmp_path_factory: Any) -> Iterator[CollKb]:
    from loader.ops.roles import grant

    fake = FakeOpenAI().start()
    base: Path = tmp_path_factory.mktemp("coll-kb")
    name = f"pgkb_procs_{uuid.uuid4().hex[:8]}"
    reader, hr_reader = f"all_read_{uuid.uuid4().hex[:6]}", f"hr_read_{uuid.uuid4().hex[:6]}"
    url = create_database(pg_url, name, template=template_db)
    try:
        settings = ingest_settings(url, base, fake)
        ingest_collections(settings, base / "docs")
        for role in (reader, hr_reader):
            _create_role(pg_url, role)
        with psycopg.connect(url) as conn:
            grant(conn, reader, read=True, write=False)
            grant(conn, hr_reader, read=True, write=False, collections=["hr"])
        yield CollKb(settings, url, reader, hr_reader, fake, pg_url, name, base)
    finally:
        fake.stop()
        drop_database(pg_url, name)
        for role in (reader, hr_reader):
            _drop_role(pg_url, role)
