"""Retrieval latency inside the database: p50/p95 of kb.keyword_search, kb.vector_search and
kb.hybrid_search over N queries, and the plans showing which indexes they use.

    python bench/search_latency.py --database-url URL [--queries 200] \
        [--questions eval/questions.json | DATASET/queries.jsonl]

The knowledge base at URL must be ingested (with embeddings of its active model). Queries are the
questions of --questions (when given) topped up with chunk heading paths and titles sampled from
the corpus (fixed seed), embedded beforehand with the active model; only the SQL is timed. Time is
the server's own "Execution Time" of EXPLAIN (ANALYZE, TIMING OFF) around each call (no network,
no client), so it is the latency a service calling the function sees minus the round trip.
Then one hybrid query runs under auto_explain (nested statements) and the lines of its plans
naming the HNSW and GIN indexes are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import psycopg

CALLS = {
    "keyword (bm25)": "SELECT * FROM kb.keyword_search(%(q)s, 20)",
    "keyword (ts_rank)": "SELECT * FROM kb.keyword_search(%(q)s, 20, keyword_ranking => 'ts_rank')",
    "vector": "SELECT * FROM kb.vector_search(%(v)s, 20)",
    "hybrid (defaults)": "SELECT * FROM kb.hybrid_search(%(q)s, %(v)s)",
}


def pick_queries(conn: psycopg.Connection[Any], n: int, questions: Path | None) -> list[str]:
    texts: list[str] = []
    if questions is not None and questions.suffix == ".jsonl":  # BEIR queries.jsonl
        for line in questions.read_text(encoding="utf-8").splitlines():
            texts.append(json.loads(line)["text"])
    elif questions is not None:  # eval/questions.json
        data = json.loads(questions.read_text(encoding="utf-8"))
        items = data["questions"] if isinstance(data, dict) else data
        texts += [q["question"] for q in items if isinstance(q, dict) and q.get("question")]
    pool = [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT split_part(heading_path, ' > ', -1) FROM kb.chunks "
            "WHERE heading_path <> '' UNION SELECT title FROM kb.documents"
        ).fetchall()
        if r[0] and r[0].strip()
    ]
    random.Random(42).shuffle(pool)
    texts += pool
    return texts[:n]


def server_ms(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> float:
    plan = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, params).fetchone()[0]  # type: ignore[index]
    return float(plan[0]["Execution Time"])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--questions", type=Path, default=None)
    args = parser.parse_args(argv)

    from pgvector import Vector

    from loader.db.connect import connect
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    settings = load_settings(database_url=args.database_url)
    conn = connect(args.database_url, autocommit=True)
    stats = conn.execute(
        "SELECT (SELECT count(*) FROM kb.documents), (SELECT count(*) FROM kb.chunks), "
        "(SELECT count(*) FROM kb.embeddings), (SELECT name || ' (' || dims || ' dims)' "
        "FROM kb.embedding_models WHERE is_active)"
    ).fetchone()
    assert stats is not None
    print(
        f"corpus: {stats[0]} documents, {stats[1]} chunks, {stats[2]} embeddings, model {stats[3]}"
    )
    texts = pick_queries(conn, args.queries, args.questions)
    embedder = get_embedder(settings)
    vectors = [Vector(v) for v in embedder.embed(texts)]
    print(f"{len(texts)} queries, e.g. {texts[0]!r}, {texts[-1]!r}\n")

    # warm the caches once (first touches of the index pages are not what a running service sees)
    for sql in CALLS.values():
        for text, vec in zip(texts[:20], vectors[:20], strict=True):
            conn.execute(sql, {"q": text, "v": vec}).fetchall()

    print("| call | p50 ms | p95 ms | max ms | mean ms |")
    print("|---|---|---|---|---|")
    for name, sql in CALLS.items():
        times = [
            server_ms(conn, sql, {"q": t, "v": v}) for t, v in zip(texts, vectors, strict=True)
        ]
        print(
            f"| {name} | {percentile(times, 0.5):.1f} | {percentile(times, 0.95):.1f} | "
            f"{max(times):.1f} | {statistics.fmean(times):.1f} |",
            flush=True,
        )

    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_analyze = on")
    conn.execute("SET auto_explain.log_level = notice")
    conn.execute("SELECT * FROM kb.hybrid_search(%s, %s)", (texts[0], vectors[0])).fetchall()
    print(f"\nplans of kb.hybrid_search({texts[0]!r}, <vector>) under auto_explain, index lines:")
    for plan in notices:
        for line in plan.splitlines():
            if ("Scan" in line or "Cond" in line) and ("hnsw" in line or "tsv" in line):
                print("   ", line.strip()[:160])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
