"""Extraction cost per file in the ingesting process's thread versus the extraction worker
process, and what hostile files leave behind.

    python bench/extract_overhead.py --corpus DIR [--pages 100] [--mode thread|worker]
    python bench/extract_overhead.py --hostile 8 --depth 100000 --timeout 10

``--mode thread`` times ``extract`` behind ``loader.safety.call_with_timeout`` (the bounded call
before the worker existed; run it with PYTHONPATH at an older commit to measure the old walk);
``--mode worker`` times ``loader.ingest.worker.Extractor``. ``--hostile N`` extracts N files of
DEPTH nested ``<span>``s around a ``<p>`` and prints the parent's threads, child processes and
peak RSS afterwards.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _children() -> int:
    count = 0
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as handle:
            count += len(handle.read().split())
    return count


def _rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--mode", choices=["thread", "worker"], default="worker")
    parser.add_argument("--hostile", type=int, default=0)
    parser.add_argument("--depth", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()

    from loader.ingest.extract import extract, mime_type

    if args.corpus:
        files = sorted(args.corpus.glob("*.html"))[: args.pages]
        pages = [(path, path.read_bytes()) for path in files]
        if args.mode == "thread":
            from loader.safety import call_with_timeout

            started = time.perf_counter()
            for path, data in pages:
                call_with_timeout(lambda: extract(data, path, mime_type(path)), args.timeout)
            seconds = time.perf_counter() - started
            print(f"thread: {len(pages)} pages in {seconds:.2f} s")
        else:
            from loader.ingest.worker import Extractor

            with Extractor(args.timeout, 2000) as extractor:
                extractor.extract(b"# warm\n\nup\n", Path("w.md"), "text/markdown")  # start
                started = time.perf_counter()
                for path, data in pages:
                    extractor.extract(data, path, mime_type(path))
                seconds = time.perf_counter() - started
            print(f"worker: {len(pages)} pages in {seconds:.2f} s (worker start excluded)")
    if args.hostile:
        from loader.ingest.extract import ExtractionError
        from loader.ingest.worker import Extractor

        data = (
            "<html><body>" + "<span>" * args.depth + "<p>x</p>" + "</span>" * args.depth
            + "</body></html>"
        ).encode()  # fmt: skip
        print(f"before: threads {_threads()}, children {_children()}, RSS {_rss_mb():.0f} MB")
        started = time.perf_counter()
        outcomes: list[str] = []
        with Extractor(args.timeout, 2000) as extractor:
            for i in range(args.hostile):
                try:
                    extractor.extract(data, Path(f"h{i}.html"), "text/html")
                    outcomes.append("ok")
                except ExtractionError as exc:
                    outcomes.append(exc.message[:40])
            during = (_threads(), _children())
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{args.hostile} files of {len(data) / 1e6:.1f} MB in {seconds:.1f} s: {outcomes}")
        print(f"during (worker alive): threads {during[0]}, children {during[1]}")
        print(
            f"after: threads {_threads()}, children {_children()}, RSS {_rss_mb():.0f} MB, "
            f"peak RSS {peak:.0f} MB"
        )


if __name__ == "__main__":
    main()
