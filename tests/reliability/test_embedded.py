"""Defect 8 of issue 12: the embedded server's edge cases.

- a stale ``postmaster.pid`` whose PID a different process now holds made pgkb use a dead socket,
  and ``db stop`` signal the wrong process;
- two first starts at once raced on creating the data folder and on ``CREATE DATABASE``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.db.embedded import _create_database, ensure_server, running_uri, stop_server
from tests.helpers import drop_database


def test_concurrent_create_database_never_fails(pg_url: str) -> None:
    """Many first starts at once each make sure the database exists: none of them fails."""
    for _ in range(3):
        name = f"pgkb_race_{uuid.uuid4().hex[:8]}"
        barrier = threading.Barrier(6)
        errors: list[BaseException] = []

        def create(
            name: str = name,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                barrier.wait()
                _create_database(pg_url, name)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=create) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert not errors, errors
        finally:
            drop_database(pg_url, name)


@pytest.fixture
def pgdata() -> Any:
    # a folder of its own under /tmp, as conftest's server uses (pytest's tmp_path is 0700 and
    # pruned by other pytest sessions on a shared machine; the server runs as another user)
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="pgkb-embedded-test-"))
    path = top / "data" / "pgdata"
    try:
        yield path
    finally:
        if (path / "postmaster.pid").exists():
            # the test failed with a broken server: do not hide that failure behind this one
            with contextlib.suppress(Exception):
                stop_server(path)
        shutil.rmtree(top, ignore_errors=True)


def _start_in_subprocess(pgdata: Path) -> subprocess.Popen[str]:
    code = (
        "import sys; from pathlib import Path; from loader.db.embedded import ensure_server; "
        "print(ensure_server(Path(sys.argv[1])))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(pgdata)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_first_starts_at_once_both_succeed(pgdata: Path) -> None:
    first, second = _start_in_subprocess(pgdata), _start_in_subprocess(pgdata)
    results = [p.communicate(timeout=300) for p in (first, second)]
    for process, (out, err) in zip((first, second), results, strict=True):
        assert process.returncode == 0, err
        assert out.strip().startswith("postgresql://")
    with psycopg.connect(results[0][0].strip()) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("pgkb",)


def test_a_stale_pid_file_naming_another_process_is_detected(pgdata: Path) -> None:
    url = ensure_server(pgdata)
    pid_file = pgdata / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    assert stop_server(pgdata)
    assert not pid_file.exists()

    # the machine rebooted; the postmaster's PID now belongs to an unrelated process
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        pid_file.write_text("\n".join([str(bystander.pid), *lines[1:]]) + "\n")
        assert running_uri(pgdata) is None  # not mistaken for the server
        assert stop_server(pgdata) is False  # and never signalled
        assert bystander.poll() is None
        url = ensure_server(pgdata)  # recovers: removes the stale file, starts the server
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert bystander.poll() is None
        info = pid_file.read_text().splitlines()
        assert int(info[0]) != bystander.pid
        assert running_uri(pgdata) == url
    finally:
        bystander.kill()
        bystander.wait()


def test_a_stale_pid_file_of_a_dead_process_is_recovered(pgdata: Path) -> None:
    ensure_server(pgdata)
    pid_file = pgdata / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    assert stop_server(pgdata)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pid_file.write_text("\n".join([str(dead.pid), *lines[1:]]) + "\n")
    assert running_uri(pgdata) is None
    url = ensure_server(pgdata)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert os.path.exists(pid_file)
