"""Documented commands run as a user runs them: the installed ``pgkb`` console script (or the
``opentelemetry-instrument`` launcher in front of it) in a process of its own, with its
environment, never through Click's test runner.

``pgkb db downgrade`` (its confirmation prompt, then the schema one revision back and up
again), ``pgkb db start`` (an embedded server in a fresh data folder, reused by a second start,
stopped by ``pgkb db stop``), ``pgkb serve --open`` (a fake browser named by ``BROWSER``, the
variable Python's ``webbrowser`` reads, receives the page's address once the server answers) and
``opentelemetry-instrument pgkb ...`` (the ``otel`` extra's launcher: the spans pgkb makes
reach its console exporter).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env, write_docs
from tests.processes import pgkb, process_env, run_pgkb, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _revision(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT version_num FROM kb.alembic_version").fetchone()
    assert row is not None
    return str(row[0])


def _revisions() -> list[str]:
    return sorted(p.name[:4] for p in (ROOT / "alembic" / "versions").glob("[0-9]*.py"))


def test_db_downgrade_asks_then_goes_back_and_upgrade_returns(db_url: str, tmp_path: Path) -> None:
    env = process_env({"PGKB_DATABASE_URL": db_url}, tmp_path)
    head, previous = _revisions()[-1], _revisions()[-2]
    assert _revision(db_url) == head
    # no answer to the prompt (no terminal, no input): nothing is done
    asked = run_pgkb(["db", "downgrade", previous], env, tmp_path)
    assert asked.returncode == 1 and "Downgrading can drop tables and data" in asked.stdout
    assert _revision(db_url) == head
    down = run_pgkb(["db", "downgrade", previous, "--yes"], env, tmp_path)
    assert down.returncode == 0, down.stderr
    assert f"kb schema downgraded to {previous}" in down.stderr
    assert _revision(db_url) == previous
    up = run_pgkb(["db", "upgrade"], env, tmp_path)
    assert up.returncode == 0, up.stderr
    assert _revision(db_url) == head


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data folder outside pytest's base temporary folder (see RELIABILITY.md's harness
    hazard: the embedded server runs as its own user when pgkb runs as root)."""
    folder = Path(tempfile.mkdtemp(prefix="pgkb-db-start-"))
    folder.chmod(0o755)
    try:
        yield folder / "data"
    finally:
        subprocess.run(pgkb("db", "stop"), env=process_env({"PGKB_DATA_DIR": str(folder / "data")},
                                                           folder), capture_output=True,
                       check=False, timeout=120)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


def test_db_start_starts_the_embedded_server_once_and_db_stop_stops_it(
    data_dir: Path, tmp_path: Path
) -> None:
    env = process_env({"PGKB_DATA_DIR": str(data_dir)}, tmp_path)
    started = run_pgkb(["db", "start"], env, tmp_path, timeout=300)
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    assert f"embedded PostgreSQL running, data in {data_dir / 'pgdata'}" in started.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    again = run_pgkb(["db", "start"], env, tmp_path)
    assert again.returncode == 0 and again.stdout.strip() == url  # reused: the same server
    stopped = run_pgkb(["db", "stop"], env, tmp_path)
    assert stopped.returncode == 0 and "stopped the embedded server" in stopped.stderr
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5).close()
    # with a URL of one's own there is no embedded server to start: said, exit 1
    other = run_pgkb(["db", "start"], {**env, "PGKB_DATABASE_URL": "postgresql:///x"}, tmp_path)
    assert other.returncode != 0 and "PGKB_DATABASE_URL is set" in other.stderr
    assert "Traceback" not in other.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_open_opens_the_page_in_the_browser_once_it_answers(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "fake-browser"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    browser.chmod(0o755)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    env = process_env({**settings_env(settings), "BROWSER": str(browser)}, tmp_path)
    env.pop("DISPLAY", None)  # the variable, not a desktop's browser, decides
    port = _free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        pgkb("serve", "--open", "--port", str(port)),
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        address = wait_until(
            lambda: opened.is_file() and opened.read_text().strip(),
            "the browser to be started",
            180,
            0.1,
        )
        assert address == f"http://127.0.0.1:{port}/"
        page = httpx.get(address, timeout=60)
        assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        process.terminate()
        process.wait(60)
        log.close()
    assert opened.read_text().splitlines() == [f"http://127.0.0.1:{port}/"]  # once


def _spans(stdout: str) -> list[dict[str, Any]]:
    """The console exporter's spans: JSON objects, one after another."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (start := stdout.find("{", at)) != -1:
        try:
            value, at = decoder.raw_decode(stdout, start)
        except ValueError:
            at = start + 1
            continue
        if isinstance(value, dict) and "context" in value and "name" in value:
            spans.append(value)
    return spans


def test_opentelemetry_instrument_exports_pgkbs_spans(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """As the services guide runs it: ``OTEL_TRACES_EXPORTER=console opentelemetry-instrument
    pgkb ...``: the launcher configures the SDK, and pgkb's spans (``pgkb.ingest``,
    ``pgkb.search``) come out on stdout with their attributes."""
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    assert launcher.is_file(), "the otel extra's launcher is installed with the test extra"
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    env = process_env(
        {
            **settings_env(settings),
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "pgkb-test",
        },
        tmp_path,
    )
    # the launcher finds the console script on PATH, as in a user's activated environment
    env["PATH"] = os.pathsep.join([str(launcher.parent), env.get("PATH", "")])

    def instrumented(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(launcher), "pgkb", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    ingested = instrumented("ingest", str(root))
    assert ingested.returncode == 0, ingested.stderr
    (ingest,) = [s for s in _spans(ingested.stdout) if s["name"] == "pgkb.ingest"]
    assert ingest["attributes"]["pgkb.new"] == 5
    assert ingest["resource"]["attributes"]["service.name"] == "pgkb-test"
    found = instrumented("search", "vacuum dead tuples", "--mode", "keyword", "--json")
    assert found.returncode == 0, found.stderr
    (search,) = [s for s in _spans(found.stdout) if s["name"] == "pgkb.search"]
    assert search["attributes"]["pgkb.mode"] == "keyword" and search["attributes"]["pgkb.hits"] > 0
