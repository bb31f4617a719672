"""What ``focus_coverage`` costs the gate: the signals of each question with and without the
embedder, beside the query's own embedding, through the hybrid search of PGKB_DATABASE_URL.

    python bench/abstention_focus_cost.py eval/manual/questions-b-heldout.json --limit 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    from loader.answer.abstention import compute_signals
    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.search import search
    from loader.settings import load_settings

    parser = argparse.ArgumentParser()
    parser.add_argument("questions")
    parser.add_argument("--limit", type=int, default=30)
    args = parser.parse_args()
    data = json.loads(Path(args.questions).read_text(encoding="utf-8"))
    questions = [q["question"] for q in data][: args.limit]
    settings = load_settings()
    embedder = get_embedder(settings)
    embedder.embed_query("warm up")
    timings: dict[str, list[float]] = {"query embedding": [], "without": [], "with": []}
    embedded = 0
    with connection(settings) as conn:
        for text in questions:
            t0 = time.perf_counter()
            vector = embedder.embed_query(text)
            t1 = time.perf_counter()
            hits = search(conn, text, vector, settings=settings, mode="hybrid")
            t2 = time.perf_counter()
            compute_signals(conn, text, hits)
            t3 = time.perf_counter()
            signals = compute_signals(conn, text, hits, embed=embedder.embed)
            t4 = time.perf_counter()
            conn.rollback()
            timings["query embedding"].append((t1 - t0) * 1000)
            timings["without"].append((t3 - t2) * 1000)
            timings["with"].append((t4 - t3) * 1000)
            embedded += signals["focus_coverage"] not in (None, 1.0)
    for name, values in timings.items():
        values.sort()
        p90 = values[int(0.9 * (len(values) - 1))]
        print(f"{name:16s} p50 {statistics.median(values):7.0f} ms  p90 {p90:7.0f} ms")
    print(f"{len(questions)} questions, {embedded} embedded words (a focus word not held)")


if __name__ == "__main__":
    main()
