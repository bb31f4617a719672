"""The keyword leg's bound against the exact sum on judged questions: for every question of the
given sets, kb.keyword_search's top 20 at the default bound and with max_postings => NULL (every
posting), and the rank of the first chunk of a judged source in each.

    python bench/keyword_exactness.py DATABASE_URL QUESTIONS_JSON [QUESTIONS_JSON ...]
    python bench/keyword_exactness.py DATABASE_URL --beir DATASET_DIR [--qrels QRELS_TSV]

Prints, per set, how many questions have the same top 20, how many find a judged source in the
top 20 (bounded / exact), and every question whose first judged rank differs. A question is
lost when the exact sum finds its source in the top 20 and the bounded leg does not.

With --beir (a database `pgkb eval --beir` built: one document per corpus entry, its id as the
source): nDCG@10 and recall@20 of the keyword leg alone, bounded and exact, over the judged
queries (all of them, or those of --qrels).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import psycopg

from loader.evaluation.questions import source_matches

# KEYWORD_FUNCTION: another function of the same signature to compare (e.g. an older version
# created under another schema)
FUNCTION = os.environ.get("KEYWORD_FUNCTION", "kb.keyword_search")
SQL = (
    f"SELECT k.chunk_id, d.source_uri FROM {FUNCTION}(%s, 20, max_postings => %s) k "
    "JOIN kb.documents d ON d.id = k.document_id ORDER BY k.rank"
)


def first_rank(rows: list[tuple[Any, str]], sources: list[str]) -> int | None:
    for i, (_, uri) in enumerate(rows, 1):
        if any(source_matches(s, uri) for s in sources):
            return i
    return None


def beir(url: str, folder: str, qrels_file: str | None) -> None:
    from loader.evaluation.beir import load_beir
    from loader.evaluation.metrics import ndcg_at_k, recall_at_k

    dataset = load_beir(folder, split="train", qrels_file=qrels_file)
    sums = {"bounded": [0.0, 0.0], "exact": [0.0, 0.0]}
    same = 0
    with psycopg.connect(url, autocommit=True) as conn:
        for qid, text in dataset.queries.items():
            ranked = {}
            for name, bound in (("bounded", 1000), ("exact", None)):
                rows = conn.execute(SQL, (text, bound)).fetchall()
                ranked[name] = [r[0] for r in rows]
                uris = [r[1] for r in rows]
                sums[name][0] += ndcg_at_k(uris, dataset.qrels[qid], 10)
                sums[name][1] += recall_at_k(uris, dataset.qrels[qid], 20)
            same += ranked["bounded"] == ranked["exact"]
    n = len(dataset.queries)
    for name, (ndcg, recall) in sums.items():
        print(f"{name}: nDCG@10 {ndcg / n:.4f} recall@20 {recall / n:.4f} ({n} queries)")
    print(f"same top 20: {same} of {n}")


def main() -> None:
    url, files = sys.argv[1], sys.argv[2:]
    if files and files[0] == "--beir":
        qrels = files[3] if len(files) > 3 and files[2] == "--qrels" else None
        beir(url, files[1], qrels)
        return
    with psycopg.connect(url, autocommit=True) as conn:
        for f in files:
            questions = json.loads(Path(f).read_text())
            same = found_b = found_x = lost = 0
            diffs = []
            for q in questions:
                bounded = conn.execute(SQL, (q["question"], 1000)).fetchall()
                exact = conn.execute(SQL, (q["question"], None)).fetchall()
                same += [r[0] for r in bounded] == [r[0] for r in exact]
                rb, rx = first_rank(bounded, q["sources"]), first_rank(exact, q["sources"])
                found_b += rb is not None
                found_x += rx is not None
                lost += rx is not None and rb is None
                if rb != rx:
                    diffs.append(f"  {q['id']}: bounded {rb} exact {rx}")
            print(
                f"{f}: {len(questions)} questions, same top 20 {same}, judged source in the top 20 "
                f"bounded {found_b} / exact {found_x}, lost {lost}"
            )
            print("\n".join(diffs))


if __name__ == "__main__":
    main()
