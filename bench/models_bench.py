"""The ONNX Runtime backend against PyTorch for a local embedding model: speed and quality.

Chunks a BEIR dataset's corpus as ingestion does (the model's tokenizer, the default chunk size),
embeds every chunk and every judged query with each backend, and reports per backend: chunks per
second (model load and the one-off ONNX export timed apart), and nDCG@10 / recall@10 of vector
retrieval (a document scores its best chunk, exact cosine in numpy, no database), then the cosine
between the two backends' vectors of each chunk (the backend must not change the vectors).

    python bench/models_bench.py DATASET_FOLDER [--limit 1000] [--model NAME] [--json]

DATASET_FOLDER: a BEIR folder (corpus.jsonl, queries.jsonl, qrels.tsv), e.g. SciFact train.
``--limit`` keeps the first N documents and the queries judged on them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from loader.evaluation.beir import load_beir
from loader.evaluation.metrics import ndcg_at_k, recall_at_k
from loader.ingest.chunking import Chunker
from loader.ingest.extract import Section
from loader.providers.local import DEFAULT_MODEL, LocalEmbedder
from loader.settings import Settings


def chunk_corpus(
    dataset: Any, limit: int | None, embedder: LocalEmbedder
) -> tuple[list[str], list[str]]:
    """(document id of each chunk, embedded text of each chunk), chunked as ingestion does."""
    chunker = Chunker.from_settings(Settings(), embedder)
    owners: list[str] = []
    texts: list[str] = []
    for n, doc in enumerate(dataset.documents()):
        if limit is not None and n >= limit:
            break
        for chunk in chunker.chunk(doc.title or doc.id, [Section((), doc.text or doc.title)]):
            owners.append(doc.id)
            texts.append(chunk.embed_text)
    return owners, texts


def rank(
    query_vectors: np.ndarray, chunk_vectors: np.ndarray, owners: list[str], k: int
) -> list[list[str]]:
    """Per query, the top ``k`` documents by their best chunk's cosine."""
    docs = sorted(set(owners))
    index = {d: i for i, d in enumerate(docs)}
    column = np.array([index[o] for o in owners])
    rankings = []
    for row in query_vectors @ chunk_vectors.T:
        best = np.full(len(docs), -np.inf)
        np.maximum.at(best, column, row)
        top = np.argsort(-best)[:k]
        rankings.append([docs[i] for i in top])
    return rankings


def run_backend(
    backend: str, args: argparse.Namespace, texts: list[str], queries: list[str], onnx_dir: str
) -> dict[str, Any]:
    embedder = LocalEmbedder(
        args.model, args.dims, backend=backend, onnx_dir=onnx_dir, batch_size=args.batch_size
    )
    print(f"{backend}: loading {args.model}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    embedder.model()  # load (and for onnx: export once), timed apart
    loaded = time.perf_counter() - started
    embedder.embed(texts[: min(64, len(texts))])  # warm-up
    print(f"{backend}: embedding {len(texts)} chunks", file=sys.stderr, flush=True)
    started = time.perf_counter()
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    seconds = time.perf_counter() - started
    query_vectors = np.asarray([embedder.embed_query(q) for q in queries], dtype=np.float32)
    return {
        "backend": backend,
        "load_seconds": round(loaded, 2),
        "embed_seconds": round(seconds, 2),
        "chunks_per_second": round(len(texts) / seconds, 1),
        "vectors": vectors,
        "query_vectors": query_vectors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--onnx-dir", default=None, help="Where the ONNX export is kept.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    dataset = load_beir(args.dataset, args.split)
    tokenizer_only = LocalEmbedder(args.model)
    owners, texts = chunk_corpus(dataset, args.limit, tokenizer_only)
    kept = set(owners)
    judged = {q: {d: g for d, g in rel.items() if d in kept} for q, rel in dataset.qrels.items()}
    qids = [q for q in dataset.queries if judged.get(q)]
    queries = [dataset.queries[q] for q in qids]
    onnx_dir = args.onnx_dir or tempfile.mkdtemp(prefix="pgkb-onnx-")

    results = []
    for backend in ("torch", "onnx"):
        result = run_backend(backend, args, texts, queries, onnx_dir)
        rankings = rank(result["query_vectors"], result["vectors"], owners, 10)
        result["ndcg@10"] = round(
            float(
                np.mean([ndcg_at_k(r, judged[q], 10) for q, r in zip(qids, rankings, strict=True)])
            ),
            4,
        )
        result["recall@10"] = round(
            float(
                np.mean(
                    [recall_at_k(r, judged[q], 10) for q, r in zip(qids, rankings, strict=True)]
                )
            ),
            4,
        )
        results.append(result)
    torch_r, onnx_r = results
    cosines = np.sum(torch_r["vectors"] * onnx_r["vectors"], axis=1)
    query_cosines = np.sum(torch_r["query_vectors"] * onnx_r["query_vectors"], axis=1)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    report = {
        "commit": commit,
        "model": args.model,
        "dataset": dataset.name,
        "documents": len(kept),
        "chunks": len(texts),
        "queries": len(qids),
        "batch_size": args.batch_size,
        "cpu": f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs",
        "backends": [
            {k: v for k, v in r.items() if k not in ("vectors", "query_vectors")} for r in results
        ],
        "cosine_torch_onnx": {
            "chunks_min": round(float(cosines.min()), 6),
            "chunks_mean": round(float(cosines.mean()), 6),
            "queries_min": round(float(query_cosines.min()), 6),
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['model']} on {report['dataset']}: {report['documents']} documents, "
        f"{report['chunks']} chunks, {report['queries']} queries (commit {commit})"
    )
    print("| backend | chunks/s | load s | nDCG@10 | recall@10 |")
    print("| --- | --- | --- | --- | --- |")
    for r in report["backends"]:
        print(
            f"| {r['backend']} | {r['chunks_per_second']} | {r['load_seconds']} | "
            f"{r['ndcg@10']} | {r['recall@10']} |"
        )
    c = report["cosine_torch_onnx"]
    print(
        f"cosine torch vs onnx: chunks min {c['chunks_min']}, mean {c['chunks_mean']}; "
        f"queries min {c['queries_min']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
