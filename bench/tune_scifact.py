"""SciFact, supervised tune: nDCG@10 of the held-out claims before and after `pgkb models tune`'s
training, vector leg, exact cosine (numpy, no database, so only the model differs).

Trains the bundled all-MiniLM-L6-v2 with pgkb's own code (``loader.ops.tune_pairs.beir_pairs``
on the tuning half's judgements, ``loader.ops.tune_train.train``: the trainer, loss and options
``pgkb models tune --beir DIR --qrels FILE`` uses), then chunks the first ``--limit`` abstracts
as ingestion does, embeds them and the claims with the base and the tuned model, ranks documents
by their best chunk and scores both halves' claims judged on those abstracts::

    python bench/tune_scifact.py $SCIFACT --tune-qrels eval/scifact/train-tune.tsv \
        --heldout-qrels eval/scifact/train-heldout.tsv --limit 1000 --output DIR --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from loader.evaluation.beir import load_beir, read_qrels
from loader.evaluation.metrics import ndcg_at_k, recall_at_k
from loader.ops.tune_pairs import beir_pairs, counts, digest
from loader.ops.tune_train import TrainOptions, read_provenance, train
from loader.providers.local import DEFAULT_MODEL, LocalEmbedder, model_folder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models_bench import chunk_corpus, rank


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def score(
    rankings: list[list[str]], qids: list[str], qrels: dict[str, dict[str, int]]
) -> dict[str, float]:
    n = len(qids)
    return {
        "ndcg@10": round(
            sum(ndcg_at_k(r, qrels[q], 10) for r, q in zip(rankings, qids, strict=True)) / n, 4
        ),
        "recall@5": round(
            sum(recall_at_k(r, qrels[q], 5) for r, q in zip(rankings, qids, strict=True)) / n, 4
        ),
        "queries": n,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--tune-qrels", type=Path, required=True)
    parser.add_argument("--heldout-qrels", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=None, help="First N abstracts only.")
    parser.add_argument("--output", type=Path, required=True, help="The tuned model's folder.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backend", default="onnx", choices=("torch", "onnx"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    result: dict[str, Any] = {"loadavg_start": loadavg()}
    pairs, judged = beir_pairs(args.dataset, qrels_file=args.tune_qrels)
    options = TrainOptions(
        seed=args.seed, epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size
    )
    base_folder = model_folder(DEFAULT_MODEL)
    if read_provenance(args.output) is None:
        print(f"training on {len(pairs)} pairs ({judged} claims)", file=sys.stderr, flush=True)
        provenance = train(
            base_folder,
            pairs,
            args.output,
            options,
            provenance={
                "request": {"pairs": digest(pairs), "options": options.to_dict()},
                "base_model": {"name": DEFAULT_MODEL, "dims": 384},
                "pairs": {"count": len(pairs), "kinds": counts(pairs), "digest": digest(pairs)},
            },
            progress=lambda e, i: print(e, i, loadavg(), file=sys.stderr, flush=True),
        )
    else:
        provenance = read_provenance(args.output) or {}
    result["training"] = {**provenance.get("training", {}), "steps": provenance.get("steps")}
    result["loadavg_after_training"] = loadavg()

    dataset = load_beir(args.dataset, "train", args.heldout_qrels)
    onnx_dir = tempfile.mkdtemp(prefix="tune-onnx-")
    base = LocalEmbedder(DEFAULT_MODEL, 384, backend=args.backend, onnx_dir=onnx_dir)
    owners, texts = chunk_corpus(dataset, args.limit, base)
    kept = set(owners)
    halves = {}
    for half, file in (("heldout", args.heldout_qrels), ("tune", args.tune_qrels)):
        judged_qrels = read_qrels(file)
        qrels = {
            q: {d: g for d, g in rel.items() if d in kept}
            for q, rel in judged_qrels.items()
            if any(d in kept for d in rel)
        }
        halves[half] = qrels
    queries_all = {**load_beir(args.dataset, "train").queries}
    result["chunks"] = len(texts)
    result["documents"] = len(kept)
    for label, folder in (("base", str(base_folder)), ("tuned", str(args.output))):
        embedder = LocalEmbedder(
            folder, 384, backend=args.backend, onnx_dir=onnx_dir, model_path=folder
        )
        print(f"{label}: embedding {len(texts)} chunks", file=sys.stderr, flush=True)
        started = time.perf_counter()
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        seconds = time.perf_counter() - started
        entry: dict[str, Any] = {"embed_seconds": round(seconds, 1), "loadavg": loadavg()}
        for half, qrels in halves.items():
            qids = sorted(q for q in qrels if q in queries_all)
            qv = np.asarray([embedder.embed_query(queries_all[q]) for q in qids], np.float32)
            entry[half] = score(rank(qv, vectors, owners, 10), qids, qrels)
        result[label] = entry
        print(label, json.dumps(entry), file=sys.stderr, flush=True)
    result["loadavg_end"] = loadavg()
    result["pid"] = os.getpid()
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
