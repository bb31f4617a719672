"""HNSW recall and latency of ``kb.vector_search`` against an exact scan, per ``ef_search``.

For each query (a question file's questions, or a BEIR dataset's queries), the exact top
``--top`` chunks are found with index scans disabled; then each ``ef_search`` value is timed
through the model's HNSW index and its top ``--top`` compared with the exact one. Prints one
table row per value: mean recall against the exact list, p50 and p95 latency in ms. Run against
the database of the current settings (``PGKB_DATA_DIR`` / ``PGKB_DATABASE_URL``):

    PGKB_DATA_DIR=/work/cache/manual python bench/ef_search.py \\
        --questions eval/manual/questions-tune.json
    PGKB_DATA_DIR=/work/cache/scifact PGKB_DATABASE_URL=... python bench/ef_search.py \\
        --beir ../shared/datasets/scifact-train --limit 150
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

VECTOR = "SELECT chunk_id FROM kb.vector_search(%s, %s, ef_search => %s)"


def load_queries(args: argparse.Namespace) -> list[str]:
    if args.questions:
        return [q["question"] for q in json.loads(Path(args.questions).read_text())]
    from loader.evaluation.beir import load_beir

    return list(load_beir(args.beir).queries.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--questions", help="a question file (eval/manual/questions-tune.json)")
    source.add_argument("--beir", help="a BEIR dataset folder")
    parser.add_argument("--limit", type=int, default=150, help="queries used (first N)")
    parser.add_argument("--top", type=int, default=20, help="chunks compared per query")
    parser.add_argument("--ef", default="40,100,200,400", help="ef_search values")
    args = parser.parse_args()

    import numpy as np
    from pgvector import Vector

    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    settings = load_settings()
    texts = load_queries(args)[: args.limit]
    embedder = get_embedder(settings)
    vectors = [Vector(np.asarray(embedder.embed_query(t), dtype=np.float32)) for t in texts]
    with connection(settings) as conn:
        conn.execute("SET enable_indexscan = off")
        exact = [
            {r[0] for r in conn.execute(VECTOR, (v, args.top, None)).fetchall()} for v in vectors
        ]
        conn.execute("RESET enable_indexscan")
        print(f"{len(texts)} queries, top {args.top}, exact scan as the reference")
        print("| ef_search | recall vs exact | p50 ms | p95 ms |")
        print("| --- | --- | --- | --- |")
        for ef in (int(x) for x in args.ef.split(",")):
            recalls, times = [], []
            for v, want in zip(vectors, exact, strict=True):
                start = time.perf_counter()
                got = {r[0] for r in conn.execute(VECTOR, (v, args.top, ef)).fetchall()}
                times.append((time.perf_counter() - start) * 1000)
                recalls.append(len(got & want) / max(1, len(want)))
            times.sort()
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
            print(
                f"| {ef} | {statistics.mean(recalls):.3f} "
                f"| {times[len(times) // 2]:.1f} | {p95:.1f} |"
            )


if __name__ == "__main__":
    main()
