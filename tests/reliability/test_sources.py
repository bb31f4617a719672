"""A second review of ingestion's source walk, tried as an attacker who can write into an
ingested folder and as a careless operator.

- A named pipe (``mkfifo docs/fifo.md``) hung the run forever: ``open()`` blocked before the
  extraction timeout applied, with the ingestion lock held. Anything that is not a regular file
  (FIFO, socket, device) is skipped and reported.
- A folder that can be listed but not entered (mode 0644) aborted the whole run with a traceback
  (``is_symlink`` in the walk): it is skipped and reported like an unreadable file.
- Files truncated or growing while read, and 5,000 tiny files in one run.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.ingest.extract import ExtractionError
from loader.ingest.pipeline import ingest_paths
from loader.ingest.sources import read_file, scan_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, stored_documents


def _corpus(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {path.stem}\n\nThe text of {path.stem} about vacuum.\n")


def _unblock(fifo: Path) -> None:
    """Open the FIFO's other end, so a reader blocked in open() returns (then EOF)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


def test_a_named_pipe_is_skipped_and_never_blocks(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root, ["a.md", "sub/b.md"])
    fifo = root / "fifo.md"
    os.mkfifo(fifo)
    os.mkfifo(root / "sub" / "pipe.txt")
    listener = socket.socket(socket.AF_UNIX)
    sock_dir = Path(tempfile.mkdtemp(prefix="pgkb-sock-"))  # AF_UNIX paths are short
    (sock_dir / "docs").symlink_to(root, target_is_directory=True)
    listener.bind(str(root / "sock.md"))
    settings = ingest_settings(db_url, tmp_path, fake_openai, extract_timeout=10)
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["report"] = ingest_paths(settings, [root, fifo])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)  # the run takes seconds; before the fix it never returned
    try:
        assert not thread.is_alive(), "ingest blocked on a named pipe"
    finally:
        for pipe in (fifo, root / "sub" / "pipe.txt"):
            _unblock(pipe)
        thread.join(30)
        listener.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    report = outcome["report"]
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert set(reasons) == {"fifo.md", "pipe.txt", "sock.md"}, reasons
    assert "named pipe" in reasons["fifo.md"] and "not a regular file" in reasons["fifo.md"]
    assert "socket" in reasons["sock.md"]
    assert set(stored_documents(conn)) == {"a.md", "b.md"}
    assert report.exit_code == 1


def test_reading_a_file_swapped_for_a_pipe_never_blocks(tmp_path: Path) -> None:
    """Between the walk and the read a file may become a FIFO: the read opens it non-blocking
    and checks the opened file itself."""
    fifo = tmp_path / "late.md"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[str] = []

    def read() -> None:
        try:
            read_file(fifo, 1_000_000)
        except ExtractionError as exc:
            errors.append(exc.message)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    finished = done.wait(60)
    _unblock(fifo)
    assert finished, "read_file blocked on a named pipe"
    assert errors and "not a regular file" in errors[0]


def test_a_character_device_given_by_path_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "null.txt"
    link.symlink_to("/dev/null")
    scan = scan_paths([link])
    assert scan.files == []
    assert any("character device" in reason for _, reason in scan.failures), scan.failures


# --- a folder that can be listed but not entered ------------------------------------------------


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's tmp_path is mode 0700, root's)."""
    path = Path(tempfile.mkdtemp(prefix="pgkb-walk-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for dirpath, _, _ in os.walk(path):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(path, ignore_errors=True)


def _scan_as_nobody(paths: list[Path]) -> Any:
    """scan_paths run by the unprivileged user ``nobody`` in a forked child (root enters any
    folder, so the permission cannot be provoked as root); its Scan or its traceback."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, scan, send the result, exit without cleanup
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                result: Any = scan_paths(paths)
            except BaseException as exc:  # the parent reports it
                import traceback

                result = "".join(traceback.format_exception(exc))
            with os.fdopen(write_end, "wb") as out:
                pickle.dump(result, out)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to the user nobody")
def test_a_folder_that_can_be_listed_but_not_entered_is_reported(public_tmp: Path) -> None:
    root = public_tmp / "docs"
    _corpus(root, ["a.md", "locked/secret.md", "locked/deeper/x.md", "z/ok.md"])
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o644)
    (root / "locked").chmod(0o644)  # r but no x: names can be listed, nothing opened
    scan = _scan_as_nobody([root])
    assert not isinstance(scan, str), scan  # a traceback before the fix
    assert [p.name for p in scan.files] == ["a.md", "ok.md"]
    reasons = dict(scan.failures)
    locked = str(root / "locked")
    assert locked in reasons, reasons
    assert "cannot enter folder" in reasons[locked] and "chmod" in reasons[locked]
    # prune keeps every document under it (its files cannot be checked)
    assert Path(locked) in scan.unreadable


def test_files_truncated_or_growing_while_read_are_reported_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file changes between the size check and the end of the read: the read notices and
    reports it ("changed while being read"), never storing half a file."""
    import builtins

    path = tmp_path / "moving.md"
    path.write_text("# Moving\n\n" + "words " * 1000)
    real_fdopen = os.fdopen

    for change in ("truncate", "grow"):
        path.write_text("# Moving\n\n" + "words " * 1000)

        def fdopen(fd: int, *args: Any, _change: str = change, **kwargs: Any) -> Any:
            handle = real_fdopen(fd, *args, **kwargs)
            with builtins.open(path, "r+b") as other:  # another writer, mid-read
                if _change == "truncate":
                    other.truncate(10)
                else:
                    other.seek(0, os.SEEK_END)
                    other.write(b" more words" * 100)
            return handle

        monkeypatch.setattr(os, "fdopen", fdopen)
        with pytest.raises(ExtractionError, match="changed while being read"):
            read_file(path, 1_000_000)
        monkeypatch.setattr(os, "fdopen", real_fdopen)
    assert stat.S_ISREG(os.stat(path).st_mode)


_TINY_FILES_RUN = r"""
import json, resource, sys
from pathlib import Path
from loader.ingest.pipeline import ingest_paths
from loader.settings import load_settings

settings = load_settings()
# a first run of one file: imports, the extraction worker and the client are in place
assert ingest_paths(settings, [Path(sys.argv[2])], collection="warmup").exit_code == 0
events = {}
def progress(event, info):
    events[event] = events.get(event, 0) + 1
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = ingest_paths(settings, [Path(sys.argv[1])], progress=progress)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_mb": grown / 1024, "new": report.new, "exit_code": report.exit_code,
                  "failed": report.failed[:3], "events": events}))
"""


@pytest.mark.slow  # 72 s on the loaded 2-core test machine
def test_five_thousand_tiny_files_in_one_run(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """5,000 tiny files: every one stored, a progress event per file, and the process's memory
    growth bounded (the run keeps no per-file state beyond its report). The run is measured in
    a fresh child process: this one's peak RSS is raised already by whatever ran before it in
    the session, so a growth measured here would read 0 whatever the run kept."""
    import json
    import subprocess
    import sys

    from tests.helpers import settings_env

    root, warm = tmp_path / "docs", tmp_path / "warm"
    for i in range(5000):
        sub = root / f"d{i // 500:02}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:04}.md").write_text(f"# Tiny {i}\n\nword{i} about vacuum.\n")
    warm.mkdir()
    (warm / "warm.md").write_text("# Warm\n\nThe first run's one file.\n")
    settings = ingest_settings(db_url, tmp_path, fake_openai, embedding_batch_size=256)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGKB_")}
    env.update(settings_env(settings), PGKB_EMBEDDING_BATCH_SIZE="256")
    child = subprocess.run(
        [sys.executable, "-c", _TINY_FILES_RUN, str(root), str(warm)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    run = json.loads(child.stdout.strip().splitlines()[-1])
    assert run["exit_code"] == 0, run["failed"]
    assert run["new"] == 5000
    assert run["events"]["scanned"] == 1 and run["events"]["file"] == 5000
    assert run["grown_mb"] < 300, run["grown_mb"]
    row = conn.execute("SELECT count(*) FROM kb.documents WHERE collection = 'default'").fetchone()
    assert row == (5000,)
    conn.rollback()


def test_a_folder_reached_through_an_alias_link_is_no_symlink_loop(tmp_path: Path) -> None:
    """``docs/aliases/handbook -> ../handbook``: the real folder is walked once, its files are
    ingested under their real paths, and nothing is reported: a second way to a folder is not a
    loop (walked in name order, the alias comes first, and the real folder was the one reported).
    A true loop, a link back to a folder it is in, is still reported."""
    root = tmp_path / "docs"
    _corpus(root, ["handbook/leave.md", "handbook/travel.md", "notes.md"])
    (root / "aliases").mkdir()
    (root / "aliases" / "handbook").symlink_to(root / "handbook", target_is_directory=True)
    (root / "a-first").symlink_to(root / "handbook", target_is_directory=True)
    scan = scan_paths([root])
    assert scan.failures == []
    assert [p.relative_to(root).as_posix() for p in scan.files] == [
        "handbook/leave.md",
        "handbook/travel.md",
        "notes.md",
    ]
    assert scan.unreadable == []

    (root / "handbook" / "up").symlink_to(root, target_is_directory=True)  # a real loop
    looped = scan_paths([root])
    reasons = {Path(path).name: reason for path, reason in looped.failures}
    assert list(reasons) == ["up"] and reasons["up"].startswith("symlink loop"), reasons
    assert looped.files == scan.files


# --- review 4: a link swapped in between the scan and the read ----------------------------------


def _texts(conn: psycopg.Connection[Any]) -> dict[str, str]:
    rows = conn.execute(
        "SELECT d.source_uri, string_agg(c.content, ' ' ORDER BY c.chunk_index) "
        "FROM kb.documents d JOIN kb.chunks c ON c.document_id = d.id GROUP BY 1"
    ).fetchall()
    conn.rollback()
    return {Path(uri).name: text for uri, text in rows}


def _swap_after_scan(monkeypatch: pytest.MonkeyPatch, root: Path, outside: Path) -> None:
    """Between the scan and the read (the window a writer in the folder races for), ``a.md``
    becomes a link to a file outside the folder and the folder ``sub`` a link to a folder
    outside it: real files, real links, the real scan and read."""
    from loader.ingest import pipeline

    real_scan = pipeline.scan_paths

    def scan_then_swap(paths: Any) -> Any:
        scan = real_scan(paths)
        (root / "a.md").unlink()
        (root / "a.md").symlink_to(outside / "secret.md")
        shutil.move(root / "sub", root.parent / "sub-away")
        (root / "sub").symlink_to(outside / "sub", target_is_directory=True)
        return scan

    monkeypatch.setattr(pipeline, "scan_paths", scan_then_swap)


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nThe vault code is kiwi-7731.\n")
    (outside / "sub" / "b.md").write_text("# B\n\nThe root password is plum-22.\n")
    return outside


def test_a_link_swapped_in_after_the_scan_is_not_followed_and_prune_removes_its_name(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "docs"
    _corpus(root, ["a.md", "sub/b.md", "c.md", "d.md"])
    outside = _outside(tmp_path)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).new == 4
    for name in ("a.md", "sub/b.md"):  # changed, so the swapped run reads them again
        (root / name).write_text(f"# {name}\n\nA second version of {name}.\n")
    _swap_after_scan(monkeypatch, root, outside)

    report = ingest_paths(settings, [root])

    texts = _texts(conn)
    assert not any("kiwi-7731" in t or "plum-22" in t for t in texts.values()), texts
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert set(reasons) == {"a.md", "b.md"}, reasons
    assert "symbolic link" in reasons["a.md"] and "not followed" in reasons["a.md"]
    assert "replaced by another file" in reasons["b.md"], reasons
    assert "The text of a about vacuum" in texts["a.md"]  # the stored version is kept
    assert report.exit_code == 1

    # the next --prune run: the links stand where a file and a folder of the folder were, so
    # what was stored under those names goes (before: kept forever, as lstat found the link)
    monkeypatch.undo()
    pruned = ingest_paths(settings, [root], prune=True)
    assert pruned.pruned == 2, pruned.to_dict()
    assert set(_texts(conn)) == {"c.md", "d.md"}


def test_the_watcher_reads_no_link_swapped_in_after_its_scan(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--watch`` ingests each batch's paths through the same scan and read."""
    from loader.ingest.watch import Batch, Watcher

    root = tmp_path / "docs"
    _corpus(root, ["a.md", "sub/b.md", "c.md"])
    outside = _outside(tmp_path)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    _swap_after_scan(monkeypatch, root, outside)
    watcher = Watcher(settings, [root])
    data = watcher.handle(Batch(present={root / "a.md", root / "sub", root / "c.md"}))
    texts = _texts(conn)
    assert not any("kiwi-7731" in t or "plum-22" in t for t in texts.values()), texts
    assert set(texts) == {"c.md"}, texts
    assert {Path(f["source"]).name for f in data["failed"]} == {"a.md", "b.md"}, data
