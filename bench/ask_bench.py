"""What `pgkb ask` costs before any chat model is called, per phase, and how often it abstains.

    python bench/ask_bench.py                               # eval/questions.json, configured db
    python bench/ask_bench.py --questions eval/questions.json --repeat 3

Runs every question of the file through the answer path's steps on the configured database
(PGKB_DATABASE_URL, or the embedded server in PGKB_DATA_DIR), with the configured embedding
model, and prints per-phase latency (p50 / p95 / max, milliseconds):

    embed     the query embedding (local model already loaded)
    search    kb.hybrid_search through loader.search (top match_count)
    gate      the abstention gate (loader.answer.abstention.decide)
    context   neighbour expansion (kb.merge_neighbors) and the prompt
    extract   the extractive answer (what `ask` prints with no chat model)

and, per question kind, how many questions the gate let through to the model vs abstained on.
The model load itself (seconds, once per process) is reported separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", default="eval/questions.json")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    from loader.answer.abstention import decide
    from loader.answer.context import expand_with_neighbours
    from loader.answer.extractive import extractive_answer
    from loader.answer.prompt import ANSWER_RESERVE_TOKENS, build_messages, fit_passages
    from loader.answer.retrieval import search_passages
    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    data = json.loads(Path(args.questions).read_text(encoding="utf-8"))
    questions = data["questions"] if isinstance(data, dict) else data
    settings = load_settings()
    embedder = get_embedder(settings)
    started = time.perf_counter()
    embedder.embed_query("warm up")
    load_seconds = time.perf_counter() - started

    phases: dict[str, list[float]] = defaultdict(list)
    verdicts: dict[str, list[bool]] = defaultdict(list)
    with connection(settings) as conn:
        for _ in range(args.repeat):
            for item in questions:
                text = item["question"]
                t0 = time.perf_counter()
                vector = embedder.embed_query(text)
                t1 = time.perf_counter()
                hits, passages = search_passages(
                    conn, settings, text, vector, limit=settings.match_count
                )
                t2 = time.perf_counter()
                decision = decide(conn, settings, text, hits, embed=embedder.embed)
                t3 = time.perf_counter()
                budget = settings.chat_context_tokens - ANSWER_RESERVE_TOKENS - 600
                context = fit_passages(expand_with_neighbours(conn, passages, budget // 2), budget)
                build_messages(text, context, context_tokens=settings.chat_context_tokens)
                t4 = time.perf_counter()
                extractive_answer(text, passages)
                t5 = time.perf_counter()
                for name, seconds in (
                    ("embed", t1 - t0),
                    ("search", t2 - t1),
                    ("gate", t3 - t2),
                    ("context", t4 - t3),
                    ("extract", t5 - t4),
                    ("total", t5 - t0),
                ):
                    phases[name].append(seconds * 1000)
                verdicts[item.get("kind", "?")].append(decision.abstain)
        conn.rollback()
        chunks = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()

    count = len(phases["total"])
    print(f"{count} questions x{args.repeat}, {chunks[0] if chunks else 0} chunks in the database")
    print(f"embedding model load: {load_seconds:.1f} s (once per process)\n")
    print(f"{'phase':<9} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'mean ms':>8}")
    for name in ("embed", "search", "gate", "context", "extract", "total"):
        values = phases[name]
        print(
            f"{name:<9} {statistics.median(values):>8.1f} {_pct(values, 0.95):>8.1f} "
            f"{max(values):>8.1f} {statistics.fmean(values):>8.1f}"
        )
    print(f"\n{'kind':<13} {'questions':>9} {'abstained':>9} {'to model':>9}")
    for kind, flags in sorted(verdicts.items()):
        print(f"{kind:<13} {len(flags):>9} {sum(flags):>9} {len(flags) - sum(flags):>9}")


if __name__ == "__main__":
    main()
