"""Runaway extraction (second review).

A 1.3 MB HTML file of 100,000 nested ``<span>``s around a ``<p>`` made the HTML walk quadratic
(a ``find`` at every level) and recursive. ``extract_timeout`` abandoned the thread, which kept
running: 8 such files left 9 threads and grew the process from 143 MB to 543 MB. Extraction now
runs in a worker process killed at the deadline (then restarted for the next file), and the walk
is linear and iterative.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.ingest import pipeline
from loader.ingest.extract import Extracted, extract
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, stored_documents


def nested_spans(depth: int) -> bytes:
    return (
        "<html><body>" + "<span>" * depth + "<p>deep paragraph</p>" + "</span>" * depth
        + "</body></html>"
    ).encode()  # fmt: skip


def hang_on_hang_files(data: bytes, path: str | Path, mime: str | None = None) -> Extracted:
    """:func:`extract`, except that a file named ``hang*`` never finishes (an extraction that
    outlives any deadline, whatever the machine's load)."""
    if Path(path).name.startswith("hang"):
        while True:
            time.sleep(3600)
    return extract(data, path, mime)


def _threads() -> set[str]:
    """This process's threads (their ids): a thread left behind is an id that stays."""
    return set(os.listdir("/proc/self/task"))


def _children() -> list[int]:
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as handle:
            pids += [int(p) for p in handle.read().split()]
    return pids


def test_the_html_walk_is_linear_and_never_recurses_out() -> None:
    """20,000 nested spans (260 KB; the reported file had 100,000): the paragraph is found.
    Before: RecursionError after a quadratic search (1,000 levels took 32 s on the loaded test
    machine, 5,000 did not finish in 120 s)."""
    data = nested_spans(20_000)
    result = extract(data, "deep.html")
    assert [s.text for s in result.sections] == ["deep paragraph"]


def test_a_runaway_extraction_is_killed_and_the_run_goes_on(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline, "EXTRACT", hang_on_hang_files)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(3):
        (root / f"hang{i}.md").write_text(f"# Hang {i}\n\nnever extracted\n")
        (root / f"ok{i}.md").write_text(f"# Fine {i}\n\nstored after the kill\n")
    (root / "spans.html").write_bytes(nested_spans(3000))
    threads, children = _threads(), _children()
    settings = ingest_settings(db_url, tmp_path, fake_openai, extract_timeout=5)
    report = ingest_paths(settings, [root])
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert set(reasons) == {"hang0.md", "hang1.md", "hang2.md"}, reasons
    assert all("took longer than 5 s" in r for r in reasons.values())
    assert set(stored_documents(conn)) == {"ok0.md", "ok1.md", "ok2.md", "spans.html"}
    # nothing left behind: no abandoned thread, no worker process
    assert not _threads() - threads  # other tests' threads may end meanwhile; none is added
    assert not set(_children()) - set(children)


def test_an_extraction_that_crashes_its_worker_fails_that_file_only(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline, "EXTRACT", crash_on_crash_files)
    root = tmp_path / "docs"
    root.mkdir()
    (root / "crash.md").write_text("# Crash\n\nkills its process\n")
    (root / "ok.md").write_text("# Fine\n\nstored\n")
    report = ingest_paths(ingest_settings(db_url, tmp_path, fake_openai), [root])
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert set(reasons) == {"crash.md"}
    assert "extraction process died" in reasons["crash.md"]
    assert set(stored_documents(conn)) == {"ok.md"}


def crash_on_crash_files(data: bytes, path: str | Path, mime: str | None = None) -> Extracted:
    """:func:`extract`, except that a file named ``crash*`` kills its process (as a parser
    segfault or the kernel's OOM killer would)."""
    if Path(path).name.startswith("crash"):
        os._exit(139)
    return extract(data, path, mime)
