"""A server without pgvector gets one clear message, never a traceback.

Uses a PostgreSQL server without pgvector when the machine has one (Debian's postgresql package
installs /usr/lib/postgresql/<v>/bin without pgvector); skipped elsewhere.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from loader.cli import cli


def _plain_postgres_bin() -> Path | None:
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        path = Path(bindir)
        share = Path(bindir.replace("/usr/lib/", "/usr/share/").rsplit("/bin", 1)[0])
        if (path / "initdb").exists() and not (share / "extension" / "vector.control").exists():
            return path
    return None


@pytest.fixture
def server_without_pgvector() -> Iterator[str]:
    bindir = _plain_postgres_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server without pgvector on this machine")
    run_as: list[str] = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no 'postgres' user to run the server")
        # cron-like environments leave /usr/sbin off PATH
        runuser = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin")
        if runuser is None:
            pytest.skip("running as root and no runuser to run the server as 'postgres'")
        run_as = [runuser, "-u", "postgres", "--"]
    tmp = Path(tempfile.mkdtemp(prefix="pgkb-nopgvector-"))
    if run_as:
        shutil.chown(tmp, "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = tmp / "data"
    subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {tmp} -h 127.0.0.1"
    ctl = [*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(tmp / "log")]
    subprocess.run([*ctl, "-o", options, "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*ctl, "-m", "immediate", "stop"], check=False, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_upgrade_on_a_server_without_pgvector(server_without_pgvector: str, tmp_path: Path) -> None:
    env = {"PGKB_DATABASE_URL": server_without_pgvector, "PGKB_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(cli, ["db", "upgrade"], env=env, catch_exceptions=False)
    assert result.exit_code == 2
    assert "has no pgvector extension available" in result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.stderr
