"""Split question files once into a tuning half and a held-out half, stratified by hand and kind.

Rule (reproducible without this script): the questions of each input file (one hand) are grouped
by ``kind``; each group, sorted by id, is shuffled with ``random.Random(f"{seed}:{file name}:
{kind}")`` and its first ceil(n / 2) questions go to the tuning half, the rest to the held-out
half. Both halves keep the input order of the files and of the questions within them.

    python bench/split_questions.py --seed 20261201 \
        --tune eval/handbook/questions-tune.json --heldout eval/handbook/questions-heldout.json \
        eval/handbook/questions-a.json eval/handbook/questions-b.json

Run it once per new set, before any result on the set is looked at, and write the command in the
set's README.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any


def split(files: list[Path], seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tune: list[dict[str, Any]] = []
    heldout: list[dict[str, Any]] = []
    for path in files:
        questions = json.loads(path.read_text(encoding="utf-8"))
        groups: dict[str, list[str]] = defaultdict(list)
        for q in questions:
            groups[q["kind"]].append(q["id"])
        to_tune: set[str] = set()
        for kind, ids in groups.items():
            ordered = sorted(ids)
            random.Random(f"{seed}:{path.name}:{kind}").shuffle(ordered)
            to_tune.update(ordered[: math.ceil(len(ordered) / 2)])
        for q in questions:
            (tune if q["id"] in to_tune else heldout).append(q)
    return tune, heldout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="question files, one per hand")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--tune", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    args = parser.parse_args()
    tune, heldout = split(args.files, args.seed)
    for path, rows in ((args.tune, tune), (args.heldout, heldout)):
        path.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{path}: {len(rows)} questions")


if __name__ == "__main__":
    main()
