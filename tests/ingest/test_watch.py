"""``pgkb ingest DIR --watch`` as a running process: files written, saved atomically (a temporary
file renamed over the original, as editors do), written in bursts, renamed and deleted while it
runs; each change reaches the database (polled with deadlines), a burst is one batch, a mass
deletion is refused like --prune's, and SIGTERM stops it cleanly with every document whole.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.ingest.writer import INGEST_LOCK_KEY

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 60.0
"""Seconds a change may take to show (generous: the machine may be loaded; speed is measured by
the watch rounds of ``python -m bench ingest``, its figures are in docs/measurements/ingest.md)."""


class Watch:
    def __init__(self, folder: Path, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "ingest",
             str(folder), "--watch", "--json", *args],
            env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        for reader in self.readers:
            reader.join(30)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self.lines.put(json.loads(line))

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        self.stderr.extend(self.process.stderr)

    def next_report(self, timeout: float = DEADLINE) -> dict[str, Any]:
        report = self.lines.get(timeout=timeout)
        self.seen.append(report)
        return report

    def drain(self) -> list[dict[str, Any]]:
        out = []
        while not self.lines.empty():
            out.append(self.lines.get_nowait())
        self.seen.extend(out)
        return out


def documents(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT d.source_uri, string_agg(c.content, ' ' ORDER BY c.chunk_index) "
            "FROM kb.documents d LEFT JOIN kb.chunks c ON c.document_id = d.id GROUP BY 1"
        ).fetchall()
    return {uri: text or "" for uri, text in rows}


def _waits_for_the_lock(holder: psycopg.Connection[Any]) -> bool:
    """Whether another backend waits for the ingestion lock ``holder`` holds."""
    row = holder.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid = %s AND objid = %s AND objsubid = 1",
        (INGEST_LOCK_KEY >> 32, INGEST_LOCK_KEY & 0xFFFFFFFF),
    ).fetchone()
    return bool(row and row[0])


def until(check: Callable[[], bool], what: str, timeout: float = DEADLINE) -> float:
    """Poll ``check`` until it holds; the seconds it took (fails after ``timeout``)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"not within {timeout:g} s: {what}"
        time.sleep(0.1)
    return time.monotonic() - started


@pytest.fixture
def watch(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[Callable[..., Watch]]:
    started: list[Watch] = []

    def start(*args: str) -> Watch:
        process = Watch(tmp_path / "docs", cli_env, *args)
        started.append(process)
        return process

    (tmp_path / "docs").mkdir()
    yield start
    for process in started:
        process.close()


def test_a_watched_folder_follows_writes_saves_renames_and_deletes(
    watch: Callable[..., Watch], tmp_path: Path, db_url: str
) -> None:
    docs = tmp_path / "docs"
    (docs / "leave.md").write_text("# Parental leave\n\nParents receive sixteen weeks of leave.\n")
    (docs / "travel.md").write_text("# Travel\n\nBook trains for short journeys.\n")
    (docs / "sub").mkdir()
    (docs / "sub" / "laptops.md").write_text("# Laptops\n\nOne laptop per employee.\n")
    watcher = watch("--prune")
    first = watcher.next_report(timeout=300)  # the model loads first
    assert first["event"] == "initial" and first["new"] == 3, first

    uri = lambda name: str((docs / name).resolve())  # noqa: E731

    # a new file
    (docs / "equipment.md").write_text("# Equipment\n\nUp to 600 EUR for a desk.\n")
    took = until(lambda: "600 EUR" in documents(db_url).get(uri("equipment.md"), ""), "a new file")
    print(f"a new file was searchable {took:.1f} s after its write")

    # an editor's atomic save: a temporary file written, then renamed over the original
    temporary = docs / ".leave.md.swp"
    temporary.write_text("# Parental leave\n\nParents receive twenty weeks of leave.\n")
    os.replace(temporary, docs / "leave.md")
    until(lambda: "twenty weeks" in documents(db_url)[uri("leave.md")], "an atomic save")
    assert uri(".leave.md.swp") not in documents(db_url)

    # a burst: ten writes of one file at once are one batch, and the last text wins
    watcher.drain()
    for i in range(10):
        (docs / "travel.md").write_text(f"# Travel\n\nBook trains; version {i} of the rule.\n")
    until(lambda: "version 9" in documents(db_url)[uri("travel.md")], "a burst")
    # a marker written after the burst: changes are batched and handled in order, so once the
    # marker's batch is reported, every batch of the burst has been (none is still to come)
    (docs / "marker.md").write_text("# Marker\n\nWritten after the burst.\n")
    reports: list[dict[str, Any]] = []
    until(
        lambda: any(r.get("new") for r in reports) or bool(reports.extend(watcher.drain())),
        "the marker's batch",
    )
    burst = [r for r in reports if r["event"] == "batch" and (r["changed"] or r["unchanged"])]
    assert 1 <= len(burst) <= 2, reports
    (docs / "marker.md").unlink()
    until(lambda: uri("marker.md") not in documents(db_url), "the marker removed")

    # a rename: the old name goes, the new one comes (its embeddings reused)
    os.rename(docs / "equipment.md", docs / "furniture.md")
    until(
        lambda: (
            uri("furniture.md") in documents(db_url)
            and uri("equipment.md") not in documents(db_url)
        ),
        "a rename",
    )
    # a deleted file, and a folder moved away
    (docs / "travel.md").unlink()
    until(lambda: uri("travel.md") not in documents(db_url), "a deletion")
    os.rename(docs / "sub", tmp_path / "sub-moved")
    until(lambda: uri("sub/laptops.md") not in documents(db_url), "a folder moved away")
    assert set(documents(db_url)) == {uri("leave.md"), uri("furniture.md")}

    # everything at once: refused like --prune, nothing removed
    watcher.drain()
    (docs / "leave.md").unlink()
    (docs / "furniture.md").unlink()
    until(
        lambda: any(
            "removal refused" in f["reason"] for r in watcher.drain() for f in r.get("failed", [])
        ),
        "a refused mass deletion",
    )
    assert set(documents(db_url)) == {uri("leave.md"), uri("furniture.md")}

    # SIGTERM while a change is being handled: the test holds the ingestion lock, so the
    # watcher's batch for late.md waits inside its run (seen in pg_locks) when the signal comes;
    # it finishes that batch once the lock is free, then stops cleanly, every document whole
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK_KEY,))
        (docs / "late.md").write_text("# Late\n\nWritten just before the stop.\n")
        until(lambda: _waits_for_the_lock(holder), "the watcher's batch to wait for the lock")
        watcher.process.send_signal(signal.SIGTERM)
        holder.execute("SELECT pg_advisory_unlock(%s)", (INGEST_LOCK_KEY,))
    assert watcher.process.wait(DEADLINE) == 0, "".join(watcher.stderr)
    assert "Written just before the stop" in documents(db_url)[uri("late.md")]
    with psycopg.connect(db_url) as conn:
        empty = conn.execute(
            "SELECT count(*) FROM kb.documents d "
            "WHERE NOT EXISTS (SELECT 1 FROM kb.chunks c WHERE c.document_id = d.id)"
        ).fetchone()
    assert empty == (0,)
    assert "Traceback" not in "".join(watcher.stderr)


def test_a_link_made_in_the_watched_folder_to_outside_it_is_not_followed(
    watch: Callable[..., Watch], tmp_path: Path, db_url: str
) -> None:
    """``pgkb ingest DIR`` refuses a link leaving DIR; the watcher ingested one made while it
    ran (a file or a whole folder), so anyone who may write in a watched folder could have any
    file the watcher can read put into the knowledge base."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "leave.md").write_text("# Parental leave\n\nParents receive sixteen weeks.\n")
    (outside / "folder").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nThe vault code is kiwi-7731.\n")
    (outside / "folder" / "notes.md").write_text("# Notes\n\nThe root password is plum-22.\n")
    watcher = watch()
    assert watcher.next_report(timeout=300)["event"] == "initial"
    (docs / "leak.md").symlink_to(outside / "secret.md")
    (docs / "linked").symlink_to(outside / "folder")
    (docs / "inside.md").symlink_to(docs / "leave.md")  # a link within the folder is fine
    failed: list[dict[str, str]] = []

    def reported() -> bool:
        failed.extend(f for r in watcher.drain() for f in r.get("failed", []))
        return len(failed) >= 2

    until(reported, "the two links leaving the folder reported")
    assert {Path(f["source"]).name for f in failed} == {"leak.md", "linked"}, failed
    assert all("outside the watched folder" in f["reason"] for f in failed), failed
    stored = " ".join(documents(db_url).values())
    assert "kiwi-7731" not in stored and "plum-22" not in stored


def test_watch_refuses_what_it_cannot_follow(tmp_path: Path, cli_env: dict[str, str]) -> None:
    from click.testing import CliRunner

    from loader.cli import cli

    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "nowhere"), "--watch"], env=cli_env)
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_folder_replaced_by_a_file_is_removed_and_said(
    watch: Callable[..., Watch], tmp_path: Path, db_url: str
) -> None:
    """A folder moved away and a file made at its name: the watcher judged the name by the disk
    (a file of no known type: nothing) and its documents stayed forever, unreported."""
    docs = tmp_path / "docs"
    for name in ("a", "b", "c"):
        (docs / f"{name}.md").write_text(f"# {name}\n\nThe text of {name}.\n")
    (docs / "sub").mkdir()
    (docs / "sub" / "x.md").write_text("# X\n\nThe text of x, under sub.\n")
    watcher = watch("--prune")
    assert watcher.next_report(timeout=300)["event"] == "initial"
    uri = str((docs / "sub" / "x.md").resolve())
    assert uri in documents(db_url)
    os.rename(docs / "sub", tmp_path / "sub-away")
    (docs / "sub").write_text("a file where the folder was\n")
    until(lambda: uri not in documents(db_url), "the documents under the old folder removed")
    notes: list[str] = []
    until(
        lambda: bool(notes.extend(n for r in watcher.drain() for n in r.get("notes", [])) or notes),
        "the folder turned into a file said",
        timeout=10,
    )
    assert any(f"{docs / 'sub'} is no longer a folder" in n for n in notes), notes
    assert len(documents(db_url)) == 3


def test_a_watched_folder_that_goes_is_said_and_watched_again_when_back(
    watch: Callable[..., Watch], tmp_path: Path, db_url: str
) -> None:
    """The watched folder itself moved away: the watcher went on silently (exit code 0 per
    batch), following the old folder wherever it went and never the new one at its path."""
    docs = tmp_path / "docs"
    (docs / "a.md").write_text("# A\n\nThe text of a.\n")
    (docs / "b.md").write_text("# B\n\nThe text of b.\n")
    watcher = watch("--prune")
    assert watcher.next_report(timeout=300)["event"] == "initial"
    os.rename(docs, tmp_path / "docs-away")
    events: list[dict[str, Any]] = []

    def said() -> bool:
        events.extend(watcher.drain())
        return any(e["event"] == "error" and e.get("folder") == str(docs) for e in events)

    until(said, "the folder's going reported", timeout=30)
    lost = next(e for e in events if e.get("folder") == str(docs))
    assert lost["exit_code"] == 2 and "is gone" in lost["error"], lost
    assert any("is gone" in line for line in watcher.stderr), watcher.stderr
    assert watcher.process.poll() is None  # still running, waiting for the folder
    (tmp_path / "docs-away" / "a.md").write_text("# A\n\nChanged away from the watch.\n")
    time.sleep(1.5)
    assert len(documents(db_url)) == 2  # kept while it is gone, and the old folder not followed
    assert "Changed away" not in " ".join(documents(db_url).values())

    docs.mkdir()  # a new folder at the same path: watched again, and synced whole
    (docs / "a.md").write_text("# A\n\nThe text of a, in the new folder.\n")
    (docs / "c.md").write_text("# C\n\nThe text of c, in the new folder.\n")
    (docs / "e.md").write_text("# E\n\nThe text of e, in the new folder.\n")
    names = lambda: {Path(u).name: t for u, t in documents(db_url).items()}  # noqa: E731
    until(
        lambda: set(names()) == {"a.md", "c.md", "e.md"} and "new folder" in names()["a.md"],
        "the new folder ingested whole and b.md, gone, pruned",
    )
    (docs / "d.md").write_text("# D\n\nWritten after the folder came back.\n")
    until(lambda: any(Path(u).name == "d.md" for u in documents(db_url)), "a change seen again")
    assert any(e["event"] == "resumed" for e in events + watcher.drain())
    assert "Traceback" not in "".join(watcher.stderr)
