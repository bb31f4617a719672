"""Split SciFact's train queries once into fixed tuning and held-out halves.

Rule (reproducible without this script): a judged query goes to the tuning half when
``int(sha256("scifact-train:" + query_id).hexdigest(), 16)`` is even, to the held-out half when
it is odd. The halves are written as qrels files (``query-id  corpus-id  score`` with a header),
which ``pgkb eval --beir DIR --qrels FILE`` reads instead of the dataset's own qrels:

    python bench/scifact_split.py /work/shared/datasets/scifact-train
    pgkb eval --beir /work/shared/datasets/scifact-train --qrels eval/scifact/train-tune.tsv

Tuning reads only train-tune.tsv; train-heldout.tsv is run only to report a chosen change.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "eval" / "scifact"


def half(query_id: str) -> str:
    digest = hashlib.sha256(f"scifact-train:{query_id}".encode()).hexdigest()
    return "tune" if int(digest, 16) % 2 == 0 else "heldout"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="the scifact-train BEIR folder")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    lines = (args.dataset / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [line for line in lines[1:] if line.strip()]
    halves: dict[str, list[str]] = {"tune": [], "heldout": []}
    for row in rows:
        halves[half(row.split("\t")[0])].append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, selected in halves.items():
        path = args.out / f"train-{name}.tsv"
        path.write_text("\n".join([header, *selected]) + "\n", encoding="utf-8")
        queries = len({row.split("\t")[0] for row in selected})
        print(f"{path}: {queries} queries, {len(selected)} judgements")


if __name__ == "__main__":
    main()
