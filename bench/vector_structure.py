"""Neighbourhood structure of scale_bench.py's synthetic vectors against the real ones: does a
generator give HNSW the kind of data it meets on real sentence vectors?

    python bench/vector_structure.py --source URL [--scifact DIR] [--queries Q.json] \
        [--sizes 100000,1000000] [--sample 500] [--copies 2600:39] [--hnsw-url SCRATCH_URL] \
        [--hnsw-queries 300] [--json out.json]

For each set of vectors, a sample of its points (seeded) and their exact 20 nearest other
points of the set (cosine, numpy):
- median cosine distance to the 1st, 10th and 20th neighbour;
- share of the 20 neighbours that are siblings (derived from the same source vector);
- median local intrinsic dimensionality (Levina-Bickel MLE on the 20 neighbour distances):
  HNSW's recall at a given ef_search falls as it grows;
and for the real queries of --queries (the vectors scale_bench.py cached): the distance to
their 1st and 20th nearest chunk and the number of distinct sources among their 20.

The sets: (a) the source's real vectors; then, per generator (scale_bench.VECTORS), (b) a
doubling check: a random half of the real vectors as sources grown back to the full count by the
generator, compared with (a), the only size where the real answer is known; (c) a copies check
(--copies SOURCES:COPIES, default 2600:39): a random subset of the real vectors, each with as
many derived points as a source has at 1M chunks (39), about 100k points: the 1M corpus's ratio
at a size where an HNSW index builds in seconds; (d) the corpora of --sizes as scale_bench.py
builds them (all real vectors as sources).

With --hnsw-url (a scratch database on a server with pgvector; a table created and dropped
there), (a), (b) and (c) are also indexed by HNSW (m 16, ef_construction 64) and recall@20 of
the first --hnsw-queries queries against their exact top 20 measured at several ef_search (the
bare index scan, `ORDER BY v <=> q LIMIT 20`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scale_bench as sb

K = 20
GENERATORS = ["noise", "smote", "spread"]


def top_k(points: np.ndarray, data: np.ndarray, k: int, skip: np.ndarray | None) -> tuple:
    """Indices and cosine distances of the k nearest rows of data for each point (excluding row
    skip[p] of point p, itself), nearest first."""
    best_s = np.full((len(points), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(points), k), dtype=np.int64)
    for start in range(0, len(data), 100_000):
        sims = points @ data[start : start + 100_000].T
        if skip is not None:
            rows = np.nonzero((skip >= start) & (skip < start + len(sims[0])))[0]
            sims[rows, skip[rows] - start] = -np.inf
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(sims, top, axis=1)], axis=1)
        cand_i = np.concatenate([best_i, top + start], axis=1)
        keep = np.argsort(-cand_s, axis=1)[:, :k]
        best_s = np.take_along_axis(cand_s, keep, axis=1)
        best_i = np.take_along_axis(cand_i, keep, axis=1)
    return best_i, 1.0 - best_s


def lid(dist: np.ndarray) -> np.ndarray:
    """Levina-Bickel MLE of the local intrinsic dimensionality from k sorted neighbour
    distances (Euclidean, from cosine distances of unit vectors)."""
    d = np.sqrt(np.maximum(2 * dist, 1e-12))
    logs = np.log(d[:, :-1] / d[:, -1:])
    mean = logs.mean(axis=1)
    return -1.0 / np.where(mean < 0, mean, -1e-9)


def structure(
    data: np.ndarray, base: np.ndarray, sample: int, queries: np.ndarray | None
) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(data), min(sample, len(data)), replace=False))
    idx, dist = top_k(data[pick], data, K, pick)
    siblings = base[idx] == base[pick][:, None]
    out: dict[str, Any] = {
        "points": len(data),
        "sources": len(np.unique(base)),
        "d1": round(float(np.median(dist[:, 0])), 4),
        "d10": round(float(np.median(dist[:, 9])), 4),
        "d20": round(float(np.median(dist[:, K - 1])), 4),
        "sibling_share": round(float(siblings.mean()), 3),
        "lid": round(float(np.median(lid(dist))), 1),
    }
    if queries is not None:
        qidx, qdist = top_k(queries, data, K, None)
        out["query_d1"] = round(float(np.median(qdist[:, 0])), 4)
        out["query_d20"] = round(float(np.median(qdist[:, K - 1])), 4)
        out["query_sources_in_20"] = round(
            statistics.fmean(len(set(base[r].tolist())) for r in qidx), 1
        )
    return out


def hnsw_recall(url: str, data: np.ndarray, queries: np.ndarray, label: str) -> dict[str, Any]:
    """recall@20 of an HNSW index (m 16, ef_construction 64) on data against the exact top 20."""
    from pgvector import Vector
    from pgvector.psycopg import register_vector

    from loader.db.connect import connect

    exact, _ = top_k(queries, data, K, None)
    out: dict[str, Any] = {}
    with connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS structure_probe")
        conn.execute(f"CREATE TABLE structure_probe (id int, v vector({data.shape[1]}))")
        with conn.cursor().copy("COPY structure_probe (id, v) FROM STDIN (FORMAT BINARY)") as c:
            c.set_types(["integer", "vector"])
            for i, v in enumerate(data):
                c.write_row((i, v))
        started = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("CREATE INDEX ON structure_probe USING hnsw (v vector_cosine_ops)")
        out["build_s"] = round(time.perf_counter() - started, 1)
        conn.execute("ANALYZE structure_probe")
        for ef in (10, 20, 40, 100, 200):
            conn.execute(f"SET hnsw.ef_search = {ef}")
            hits = []
            for q, want in zip(queries, exact, strict=True):
                got = conn.execute(
                    "SELECT id FROM structure_probe ORDER BY v <=> %s LIMIT 20", (Vector(q),)
                ).fetchall()
                hits.append(len({r[0] for r in got} & set(want.tolist())) / K)
            out[f"ef_search {ef}"] = round(statistics.fmean(hits), 4)
        conn.execute("DROP TABLE structure_probe")
    print(f"    HNSW {label}: {out}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", required=True, help="pgkb database with real chunks+vectors")
    parser.add_argument("--scifact", type=Path, default=None, help="BEIR SciFact folder")
    parser.add_argument("--queries", type=Path, help="query vectors cached by scale_bench.py")
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--copies", default="2600:39", help="SOURCES:COPIES of the copies check")
    parser.add_argument("--hnsw-url", help="scratch database for the HNSW recall checks")
    parser.add_argument("--hnsw-queries", type=int, default=300)
    parser.add_argument("--json", type=Path, default=Path("vector_structure.json"))
    args = parser.parse_args(argv)

    texts, vectors, model, _ = sb.read_source(args.source)
    sci_texts, _ = sb.read_scifact(args.scifact)
    n_texts, n_real = len(texts) + len(sci_texts), len(vectors)
    queries = None
    if args.queries:
        queries = np.array(json.loads(args.queries.read_text())["vectors"], dtype=np.float32)
    print(f"{n_real} real {model} vectors, {n_texts} texts", flush=True)
    results: dict[str, Any] = {"load_average": Path("/proc/loadavg").read_text().split()[:3]}

    def record(name: str, data: np.ndarray, base: np.ndarray) -> None:
        results[name] = structure(data, base, args.sample, queries)
        print(f"{name}: {results[name]}", flush=True)

    hnsw = args.hnsw_url and queries is not None

    def index(name: str, data: np.ndarray) -> None:
        if hnsw:
            assert queries is not None
            results[name]["hnsw"] = hnsw_recall(
                args.hnsw_url, data, queries[: args.hnsw_queries], name
            )

    record("real", vectors, np.arange(n_real))
    index("real", vectors)
    half = np.sort(np.random.default_rng(1).choice(n_real, n_real // 2, replace=False))
    n_sources, copies = (int(x) for x in args.copies.split(":"))
    subset = np.sort(np.random.default_rng(2).choice(n_real, n_sources, replace=False))
    for kind in GENERATORS:
        grown = sb.synthetic_vectors(n_real, len(half), vectors[half], kind)
        record(f"doubling, {kind}", grown, sb.vector_sources(n_real, len(half), len(half)))
        index(f"doubling, {kind}", grown)
        size = n_sources * copies
        grown = sb.synthetic_vectors(size, n_sources, vectors[subset], kind)
        name = f"copies {n_sources}x{copies}, {kind}"
        record(name, grown, sb.vector_sources(size, n_sources, n_sources))
        index(name, grown)
    neighbours = sb.real_neighbours(vectors)
    for size in (int(s) for s in args.sizes.split(",")):
        for kind in GENERATORS:
            data = sb.synthetic_vectors(size, n_texts, vectors, kind, neighbours)
            record(f"{size}, {kind}", data, sb.vector_sources(size, n_texts, n_real))
            del data
    results["load_average_after"] = Path("/proc/loadavg").read_text().split()[:3]
    args.json.write_text(json.dumps(results, indent=2))
    print(f"JSON: {args.json}")


if __name__ == "__main__":
    main()
