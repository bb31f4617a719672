"""The keyword leg's postings budget on a corpus kept by bench/scale_bench.py: server-side time
of each leg (kb.keyword_search at max_postings 1000, 500 and 250; kb.vector_search at ef_search
200, 100, 40; kb.hybrid_search defaults), then each budget's agreement with the exact sum
(max_postings => NULL): the share of the exact top 20 it returns.

    python bench/keyword_budget.py CORPUS_URL QUERIES_JSON [N_QUERIES]

KEYWORD_FUNCTION=schema.name adds that function (the same signature: e.g. an earlier version of
kb.keyword_search created under another schema) to both parts, at its default bound, so two
versions are compared in the same run on the same data. BUDGETS=1000,700,500 changes the bounds
compared (default 1000,500,250).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scale_bench as sb
from pgvector import Vector

BUDGETS = [int(b) for b in os.environ.get("BUDGETS", "1000,500,250").split(",")]
OTHER = os.environ.get("KEYWORD_FUNCTION")
CASES = {
    "keyword max_postings 1000": "SELECT * FROM kb.keyword_search(%(q)s, 20)",
    "keyword max_postings 500": "SELECT * FROM kb.keyword_search(%(q)s, 20, max_postings => 500)",
    "keyword max_postings 250": "SELECT * FROM kb.keyword_search(%(q)s, 20, max_postings => 250)",
    "vector ef_search 200": "SELECT * FROM kb.vector_search(%(v)s, 20)",
    "vector ef_search 100": "SELECT * FROM kb.vector_search(%(v)s, 20, ef_search => 100)",
    "vector ef_search 40": "SELECT * FROM kb.vector_search(%(v)s, 20, ef_search => 40)",
    "hybrid defaults": "SELECT * FROM kb.hybrid_search(%(q)s, %(v)s)",
}
if OTHER:
    CASES[f"{OTHER} (default bound)"] = f"SELECT * FROM {OTHER}(%(q)s, 20)"


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    from loader.db.connect import connect

    url, cache = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    qs, vs = cache["queries"][:n], [Vector(v) for v in cache["vectors"][:n]]
    with connect(url, autocommit=True) as conn:
        for name, sql in CASES.items():
            for q, v in zip(qs[:10], vs[:10], strict=True):
                conn.execute(sql, {"q": q, "v": v}).fetchall()
            before = load()
            t = [sb.server_ms(conn, sql, {"q": q, "v": v}) for q, v in zip(qs, vs, strict=True)]
            print(
                f"| {name} | {sb.percentile(t, 0.5):.2f} | {sb.percentile(t, 0.95):.2f} | "
                f"{before} -> {load()} |",
                flush=True,
            )
        exact = "SELECT chunk_id FROM kb.keyword_search(%(q)s, 20, max_postings => NULL)"
        truth = [[r[0] for r in conn.execute(exact, {"q": q})] for q in qs]
        compared = [("kb.keyword_search", b) for b in BUDGETS] + ([(OTHER, 1000)] if OTHER else [])
        for function, budget in compared:
            overlap, top10_same = [], 0
            for q, true in zip(qs, truth, strict=True):
                got = [
                    r[0]
                    for r in conn.execute(
                        f"SELECT chunk_id FROM {function}(%(q)s, 20, max_postings => %(m)s)",
                        {"q": q, "m": budget},
                    )
                ]
                if true:
                    overlap.append(len(set(got) & set(true)) / len(true))
                top10_same += got[:10] == true[:10]
            print(
                f"{function} max_postings {budget}: share of the exact top 20 "
                f"{statistics.fmean(overlap):.4f}, same top 10 {top10_same} of {len(qs)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
