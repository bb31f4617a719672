"""The keyword leg on two copies of one corpus (e.g. stored two ways), timed query by query:
for each query, each database's connection calls kb.keyword_search once to warm it and then three
times, its best server-side time kept (EXPLAIN (ANALYZE, TIMING OFF)); the databases alternate,
so a load that comes and goes falls on both alike. Plain questions and identifier questions (the
leg reads their candidates' content too) are reported apart. It also counts the queries whose
results differ between the two databases (the keyword leg's top 20 with scores and ranks, and
kb.hybrid_search at its defaults with the cached query vector): two copies of one corpus stored
differently must give none.

    python bench/keyword_ab_databases.py QUERIES_JSON N_QUERIES URL_A URL_B

QUERIES_JSON: a query cache of bench/scale_bench.py (its "queries" list). Both databases are
prewarmed first (scale_bench.py --prewarm's relations).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scale_bench as sb
from pgvector import Vector

SQL = "SELECT * FROM kb.keyword_search(%(q)s, 20)"
SAME = (
    "SELECT chunk_id, score, rank FROM kb.keyword_search(%(q)s, 20)",
    "SELECT chunk_id, score, vector_rank, keyword_rank FROM kb.hybrid_search(%(q)s, %(v)s)",
)


def main() -> None:
    from loader.db.connect import connect

    queries_file, n, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:5]
    cache = json.loads(Path(queries_file).read_text())
    queries = cache["queries"][:n]
    vectors = [Vector(v) for v in cache["vectors"][:n]]
    differ = 0
    conns = [connect(url, autocommit=True) for url in urls]
    try:
        for conn in conns:
            sb.prewarm(conn)
        times: list[dict[bool, list[float]]] = [{True: [], False: []} for _ in urls]
        for q, v in zip(queries, vectors, strict=True):
            results = [
                [conn.execute(sql, {"q": q, "v": v}).fetchall() for sql in SAME] for conn in conns
            ]
            differ += results[0] != results[1]
            row = (
                conns[0]
                .execute("SELECT identifiers IS NOT NULL FROM kb.search_query(%s)", (q,))
                .fetchone()
            )
            identifiers = bool(row and row[0])
            for conn, t in zip(conns, times, strict=True):
                conn.execute(SQL, {"q": q}).fetchall()
                t[identifiers].append(min(sb.server_ms(conn, SQL, {"q": q}) for _ in range(3)))
    finally:
        for conn in conns:
            conn.close()
    print("| database | questions | n | p50 ms | p95 ms | mean ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for url, t in zip(urls, times, strict=True):
        name = urlsplit(url).path.lstrip("/") or url  # the database of a URL, else the string
        for identifiers, values in sorted(t.items()):
            print(
                f"| {name} | {'identifier' if identifiers else 'plain'} | {len(values)} | "
                f"{sb.percentile(values, 0.5):.2f} | {sb.percentile(values, 0.95):.2f} | "
                f"{statistics.fmean(values):.2f} |"
            )
    print(f"\nresults differ between the databases for {differ} of {len(queries)} queries")


if __name__ == "__main__":
    main()
