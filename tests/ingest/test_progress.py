"""An ingestion run shows where it is: files read, chunks embedded out of the (estimated)
total, documents written, the rate and the time left; redrawn in place at a terminal, one line
every few seconds on stderr otherwise, counted as the work happens (not when it ends)."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader import safety
from loader.cli import cli
from loader.cli import progress as progress_module
from loader.cli.progress import ProgressDisplay
from loader.ingest.progress import Tracker
from tests.fake_openai import FakeOpenAI, Reply, Request, fake_vector
from tests.helpers import ingest_settings as _settings
from tests.helpers import settings_env as _env
from tests.helpers import write_docs as _write_docs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_tracker_estimates_the_total_then_counts_exactly() -> None:
    clock = Clock()
    tracker = Tracker(clock)
    tracker("scanned", {"files": ["a", "b", "c", "d"], "bytes": 4000})
    assert tracker.line() == "0/4 files read, 0/? chunks embedded, 0 documents written"
    tracker("file", {"source": "a", "status": "parsed", "bytes": 1000, "chunks": 50})
    # a quarter of the bytes held 50 chunks: about 200 in all
    assert "1/4 files read, 0/~200 chunks embedded" in tracker.line()
    for count in (20, 20, 10):
        clock.now += 10
        tracker("embedded", {"count": count, "reused": 0})
    tracker("embedded", {"count": 0, "reused": 0})  # the end of a batch: no call, no rate
    tracker("document", {"source": "a", "status": "new", "chunks": 50})
    line = tracker.line()
    # 30 chunks in the 20 s since the first call returned; 150 to go at 1.5/s: 100 s
    assert "50/~200 chunks embedded (1.5/s), 1 document written, about 1 min 40 s left" in line
    tracker("file", {"source": "b", "status": "unchanged", "bytes": 1000, "chunks": 0})
    tracker("file", {"source": "c", "status": "parsed", "bytes": 1000, "chunks": 10})
    tracker("file", {"source": "d", "status": "parsed", "bytes": 1000, "chunks": 10})
    clock.now += 10
    tracker("embedded", {"count": 15, "reused": 0})
    tracker("embedded", {"count": 0, "reused": 5})  # the rest of the batch reused
    line = tracker.line()
    assert line.startswith("4/4 files read, 70/70 chunks embedded")  # every file read: exact
    assert "5 of them reused" in line and "left" not in line
    assert tracker.fraction() == 1.0


def test_waiting_for_the_lock_is_said_at_once() -> None:
    stream = io.StringIO()
    display = ProgressDisplay(stream, live=False, interval=60)
    display("waiting", {"holder": "pgkb ingest (backend pid 42)", "pid": 42})
    assert stream.getvalue() == (
        "pgkb ingest (backend pid 42) holds the ingestion lock; waiting for it "
        "(--no-wait to exit instead)\n"
    )
    assert "waiting for the ingestion lock" in display.tracker.line()


def test_a_log_that_showed_the_run_under_way_ends_with_its_final_counts() -> None:
    # the last batch lands after the last tick and the run closes before the next one: the log
    # still ends with every chunk embedded (it used to end with the tick's short count)
    stream = io.StringIO()
    with ProgressDisplay(stream, live=False, interval=0.05) as display:
        display("scanned", {"files": ["a"], "bytes": 10})
        display("file", {"source": "a", "status": "parsed", "bytes": 10, "chunks": 3})
        deadline = time.monotonic() + 60
        while not display._logged:  # a tick has been written (bounded wait)
            assert time.monotonic() < deadline, "no progress line within 60 s"
            time.sleep(0.01)
        display._stop.set()  # no further tick: what follows is the closing line's alone
        assert display._thread is not None
        display._thread.join(60)
        assert not display._thread.is_alive()
        ticks = stream.getvalue()
        display("embedded", {"count": 3, "reused": 0})
    assert "0/3 chunks embedded" in ticks.splitlines()[0]
    closing = stream.getvalue()[len(ticks) :].splitlines()
    assert len(closing) == 1 and "1/1 files read, 3/3 chunks embedded" in closing[0], closing


def test_a_run_shorter_than_the_interval_logs_no_progress_line() -> None:
    stream = io.StringIO()
    with ProgressDisplay(stream, live=False, interval=60) as display:
        display("scanned", {"files": ["a"], "bytes": 10})
        display("file", {"source": "a", "status": "parsed", "bytes": 10, "chunks": 3})
        display("embedded", {"count": 3, "reused": 0})
    assert stream.getvalue() == ""


def test_lines_at_an_interval_when_not_live_and_redrawn_in_place_when_live() -> None:
    for live in (False, True):
        stream = io.StringIO()
        with ProgressDisplay(stream, live=live, interval=0.05) as display:
            display("scanned", {"files": ["a"], "bytes": 10})
            display("file", {"source": "a", "status": "parsed", "bytes": 10, "chunks": 3})
            time.sleep(0.7)
            display("embedded", {"count": 3, "reused": 0})
            time.sleep(0.7)
        out = stream.getvalue()
        if live:
            assert out.startswith("\ringesting [") and out.endswith("\n")
            assert out.count("\n") == 1  # one line, redrawn
            assert "[####################] 100% 1/1 files read, 3/3 chunks" in out
        else:
            lines = out.splitlines()
            assert len(lines) >= 2 and "\r" not in out
            assert all(re.match(r"ingesting: after \d+ s: 1/1 files read", ln) for ln in lines)
            assert "0/3 chunks embedded" in lines[0] and "3/3 chunks embedded" in lines[-1]


def _slow_embeddings(delay: float) -> Any:
    def reply(request: Request) -> Reply:
        inputs = request.body["input"]
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, 8)}
                for i, t in enumerate(inputs)]  # fmt: skip
        body = {"object": "list", "data": data, "model": request.body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1}}  # fmt: skip
        return Reply(body, delay=delay)

    return reply


def test_the_cli_logs_progress_on_stderr_as_chunks_are_embedded(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    conn: psycopg.Connection[Any],
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    env = {**_env(_settings(db_url, tmp_path, fake_openai)), "PGKB_EMBEDDING_BATCH_SIZE": "2"}
    fake_openai.script("/v1/embeddings", *[_slow_embeddings(0.15)] * 200)
    monkeypatch.setattr(progress_module, "LOG_INTERVAL", 0.2)
    result = CliRunner().invoke(cli, ["ingest", str(root), "--json"], env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # stdout: the JSON summary alone
    total = summary["chunks_written"]
    # a --json run: every stderr line a JSON object, the progress lines among them
    messages = [json.loads(ln)["message"] for ln in result.stderr.splitlines()]
    lines = [m for m in messages if m.startswith("ingesting: after")]
    done = [int(m.group(1)) for ln in lines if (m := re.search(r"(\d+)/~?\d+ chunks", ln))]
    assert len(done) >= 3, result.stderr
    assert done == sorted(done)
    assert any(0 < d < total for d in done)  # counted while the run was embedding
    assert re.search(rf"5/5 files read, {total}/{total} chunks embedded", lines[-1])


def test_a_json_run_writes_its_progress_as_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """On stderr (no stream given) in a ``--json`` run: one JSON object per line, like every
    note of such a run; plain text otherwise."""
    for as_json in (True, False):
        safety.stderr_as_json(as_json)
        try:
            display = ProgressDisplay(live=False, interval=60)
            display("waiting", {"holder": "pgkb ingest (backend pid 42)", "pid": 42})
        finally:
            safety.stderr_as_json(False)
        err = capsys.readouterr().err
        if as_json:
            assert json.loads(err) == {
                "level": "info",
                "message": "pgkb ingest (backend pid 42) holds the ingestion lock; waiting for "
                "it (--no-wait to exit instead)",
            }
        else:
            assert err.startswith("pgkb ingest (backend pid 42) holds the ingestion lock")
