"""``scale``: how the cost grows to a million chunks.

For each size (corpora built as bench/corpus.py says, kept for later runs): the build (COPY
chunks/s with the keyword statistics, COPY vectors/s, HNSW build time, bytes per chunk), HNSW
recall@20 of kb.vector_search against an exact scan of every vector at several ef_search, with
and without the 1% category filter, and the three calls' latency as the ``latency`` scenario
measures it (server side, one client, warm, interleaved; the common-word bound).

A million 384-dimension vectors need about 3 GB of maintenance_work_mem for the HNSW build
(``--maintenance-work-mem 3GB``) and, to be served from memory, a shared_buffers that holds
what searches read (``--prewarm``; see the scaling guide).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import psycopg

from bench import common, corpus, latency


def add_arguments(parser: argparse.ArgumentParser) -> None:
    corpus.add_options(parser, sizes="100000,1000000")
    parser.add_argument("--queries", type=int, default=500, help="questions timed per call")
    parser.add_argument("--questions", type=Path, action="append", default=[])
    parser.add_argument("--recall-queries", type=int, default=100)
    parser.add_argument(
        "--ef-search",
        default="default,40,100,200,400",
        help="values for the recall ('default': the one recorded with the index)",
    )
    parser.add_argument("--words", type=int, default=10, help="most frequent words timed")
    parser.add_argument("--prewarm", action="store_true", help="pg_prewarm what searches read")
    latency.keyword_backends(parser)
    parser.set_defaults(call=[], calls=None, setup=None, plans=False)


def run(args: Any) -> dict[str, Any]:
    run = common.Run("scale", args)
    ef_search = [None if e == "default" else int(e) for e in args.ef_search.split(",")]
    calls = latency.calls(args)[0]
    figures: dict[str, Any] = {"corpora": {}}
    builds, recalls, timings = [], [], []
    for label, url, built in corpus.targets(args):
        run.postgres(url)
        result = latency.measure(url, calls, args)
        result["built"] = built
        result["recall"] = recall(url, args, ef_search)
        figures["corpora"][label] = result
        if built:
            builds.append(
                [
                    label,
                    built["copy_chunks_per_s"],
                    built["copy_embeddings_per_s"],
                    built["hnsw_build_s"],
                    built["storage"]["total_b_per_chunk"],
                    built["storage"]["database_mb"],
                    "kept" if built.get("kept") else "this run",
                ]
            )
        for key, r in result["recall"].items():
            recalls.append([label, key, r["recall_at_20"], r["p50"], r["p95"]])
        for call in calls:
            f = result["calls"][call.name]
            timings.append([label, result["chunks"], call.name, f["p50"], f["p95"], f["p99"]])
    run.table(
        "Build (COPY path, no embedding)",
        ["chunks", "COPY chunks/s", "COPY vectors/s", "HNSW build s", "bytes/chunk", "DB MB", ""],
        builds,
    )
    run.table(
        "HNSW recall@20 against an exact scan (server-side ms)",
        ["chunks", "filter, ef_search", "recall@20", "p50", "p95"],
        recalls,
    )
    run.table(
        "Server-side ms, one client, warm",
        ["corpus", "chunks", "call", "p50", "p95", "p99"],
        timings,
    )
    return run.finish(figures)


def recall(url: str, args: Any, ef_search: list[int | None]) -> dict[str, Any]:
    """recall@20 of kb.vector_search against the exact top 20 (every vector compared, index
    scans off), with no filter and with the 1% category ``c00``, and its server-side time; an
    ef_search of None is the search's default (the one recorded with the index)."""
    from pgvector.psycopg import register_vector

    config = common.model_settings(url)
    texts = common.questions(url, args.recall_queries, args.questions)
    vectors = common.embed(texts, config)
    dims = config.embedding_dims
    exact = (
        "SELECT e.chunk_id FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id "
        "JOIN kb.documents d ON d.id = c.document_id WHERE (%(cat)s::text IS NULL OR "
        f"d.category = %(cat)s) ORDER BY e.embedding::vector({int(dims)}) <=> %(v)s, e.chunk_id "
        "LIMIT 20"
    )
    search = "SELECT chunk_id FROM kb.vector_search(%(v)s, 20, %(f)s::jsonb, ef_search => %(ef)s)"
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET enable_indexscan = off")
        truth = {
            cat: [{r[0] for r in conn.execute(exact, {"v": v, "cat": cat})} for v in vectors]
            for cat in (None, "c00")
        }
        conn.execute("RESET enable_indexscan")
        for cat in (None, "c00"):
            if not any(truth[cat]):  # a knowledge base without the benchmark's categories
                continue
            f = json.dumps({"category": cat} if cat else {})
            for ef in ef_search:
                hits, times = [], []
                for v, true in zip(vectors, truth[cat], strict=True):
                    params = {"v": v, "f": f, "ef": ef}
                    got = {r[0] for r in conn.execute(search, params)}
                    hits.append(len(got & true) / max(len(true), 1))
                    times.append(common.server_ms(conn, search, params))
                key = f"{'category 1%' if cat else 'no filter'}, {ef or 'default'}"
                out[key] = {
                    "recall_at_20": round(statistics.fmean(hits), 4),
                    **common.summary(times),
                }
    return out
