"""How fast BM25 can be scored from postings alone in SQL: the prototype of
bench/exact_from_postings.sql (every posting of every lexeme stored with its term frequency and
chunk length; the lists read in impact order; chunks scored exactly from their tsvector only
when a bound cannot rule them out) against kb.keyword_search, bounded and exact.

    python bench/exact_from_postings.py CORPUS_URL QUERIES_JSON [N_QUERIES] [MAX_READ,...]

CORPUS_URL: a corpus kept by bench/scale_bench.py (the owner's URL: the script creates schema
kbx with the postings table, which takes about 15 s and 480 MB at 100k chunks). For each query:
server-side time (best of three, alternating), whether the prototype's top 20 equals the exact
sum's (kb.keyword_search with max_postings => NULL) and whether it proved its result exact.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scale_bench as sb


def main() -> None:
    from loader.db.connect import connect

    url, queries_file = sys.argv[1], Path(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    reads = [int(r) for r in (sys.argv[4] if len(sys.argv) > 4 else "2000,5000,20000").split(",")]
    queries = json.loads(queries_file.read_text())["queries"][:n]
    bounded = "SELECT chunk_id FROM kb.keyword_search(%(q)s, 20)"
    calls = {"kb.keyword_search (max_postings 1000)": bounded}
    calls.update(
        {
            f"prototype, max_read {r}": f"SELECT chunk_id FROM kbx.kw_fast(%(q)s, 20, {r})"
            for r in reads
        }
    )
    with connect(url, autocommit=True) as conn:
        conn.execute((Path(__file__).parent / "exact_from_postings.sql").read_text())
        conn.execute("VACUUM ANALYZE kbx.postings_all")
        plain = [
            q
            for q in queries
            if conn.execute(
                "SELECT NOT coalesce(strict_first, false) AND identifiers IS NULL"
                " FROM kb.search_query(%s)",
                (q,),
            ).fetchone()
            == (True,)
        ]
        times: dict[str, list[float]] = {c: [] for c in calls}
        same: dict[str, int] = dict.fromkeys(calls, 0)
        proved: dict[str, int] = dict.fromkeys(calls, 0)
        for q in plain:
            p = {"q": q}
            exact = [
                r[0]
                for r in conn.execute(
                    "SELECT chunk_id FROM kb.keyword_search(%(q)s, 20, max_postings => NULL)", p
                ).fetchall()
            ]
            for name, sql in calls.items():
                got = [r[0] for r in conn.execute(sql, p).fetchall()]
                same[name] += got == exact
                times[name].append(min(sb.server_ms(conn, sql, p) for _ in range(3)))
                if "kw_fast" in sql:
                    row = conn.execute(sql.replace("chunk_id", "bool_and(exact_all)"), p).fetchone()
                    proved[name] += bool(row and row[0])
    print(f"{len(plain)} plain questions of {len(queries)} (no quotes, no identifiers)")
    print("| call | p50 ms | p95 ms | mean ms | top 20 = exact sum | proved exact |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, t in times.items():
        proof = f"{proved[name]}" if "prototype" in name else "-"
        print(
            f"| {name} | {sb.percentile(t, 0.5):.2f} | {sb.percentile(t, 0.95):.2f} | "
            f"{statistics.fmean(t):.2f} | {same[name]} | {proof} |"
        )


if __name__ == "__main__":
    main()
