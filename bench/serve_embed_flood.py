"""Search latency through ``pgkb serve`` while one ``/v1/embeddings`` request of 256 long inputs
runs: the first search sent during it waited for the whole request before inputs were embedded
16 at a time with searches going first.

    python bench/serve_embed_flood.py --database-url URL [--tree DIR] [--label NAME]

Starts ``pgkb serve`` from ``--tree`` (a checkout of pgkb; default this one) against URL (a
knowledge base of the local all-MiniLM-L6-v2), sends three searches and five timed ones, then a
256-input request (each input about 200 words) and, one second later, three searches one after
the other. Prints one line: the idle search median, the three searches' times during the
request, the request's own time and the load average.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

QUERY = {"query": "How do I build an index without locking writes?"}
WORDS = (
    "vacuum reclaims storage of dead tuples while autovacuum keeps the tables healthy and small "
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--label", default="this tree")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": args.tree, "PGKB_DATABASE_URL": args.database_url}
    process = subprocess.Popen(
        [sys.executable, "-c", "from loader.cli import main; main()", "serve", "--port", str(port)],
        env=env,
        cwd=args.tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("pgkb serve did not start")
            time.sleep(0.5)
        for _ in range(3):
            httpx.post(base + "/v1/search", json=QUERY, timeout=300).raise_for_status()
        idle = [_timed_search(base) for _ in range(5)]
        texts = [f"{i} " + WORDS * 20 for i in range(256)]
        request: dict[str, float] = {}

        def flood() -> None:
            started = time.perf_counter()
            httpx.post(base + "/v1/embeddings", json={"input": texts}, timeout=1800)
            request["seconds"] = time.perf_counter() - started

        thread = threading.Thread(target=flood)
        thread.start()
        time.sleep(1.0)
        during = [_timed_search(base) for _ in range(3)]
        thread.join()
        load = Path("/proc/loadavg").read_text().split()[0]
        print(
            f"{args.label}: idle search median {sorted(idle)[2] * 1000:.0f} ms; during the "
            f"256-input request: {', '.join(f'{d:.2f}' for d in during)} s; the request took "
            f"{request['seconds']:.1f} s; load average {load}"
        )
    finally:
        process.terminate()
        process.wait(timeout=60)


def _timed_search(base: str) -> float:
    started = time.perf_counter()
    httpx.post(base + "/v1/search", json=QUERY, timeout=1800).raise_for_status()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
