"""Two versions of the keyword leg timed in the same run, query by query: for each query, each
function called once to warm it and then three times, its best server-side time kept (the
Execution Time of EXPLAIN (ANALYZE, TIMING OFF)); the functions alternate, so a load that comes
and goes on a shared machine falls on both alike.

    python bench/keyword_interleaved.py CORPUS_URL QUERIES_JSON N_QUERIES FUNCTION [FUNCTION ...]

FUNCTION: kb.keyword_search, or an earlier version of it created under another schema (e.g.
kbx.keyword_search from an older migration's SQL). QUERIES_JSON: a query cache of
bench/scale_bench.py (its "queries" list).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scale_bench as sb


def main() -> None:
    from loader.db.connect import connect

    url, queries_file, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    functions = sys.argv[4:]
    queries = json.loads(Path(queries_file).read_text())["queries"][:n]
    times: dict[str, list[float]] = {f: [] for f in functions}
    load_before = Path("/proc/loadavg").read_text().split()[0]
    with connect(url, autocommit=True) as conn:
        for q in queries:
            for f in functions:
                sql = f"SELECT * FROM {f}(%(q)s, 20)"
                conn.execute(sql, {"q": q}).fetchall()
                times[f].append(min(sb.server_ms(conn, sql, {"q": q}) for _ in range(3)))
    load_after = Path("/proc/loadavg").read_text().split()[0]
    for f, t in times.items():
        print(
            f"| {f} | {sb.percentile(t, 0.5):.2f} | {sb.percentile(t, 0.95):.2f} | "
            f"{sb.percentile(t, 0.99):.2f} | {load_before} -> {load_after} |"
        )


if __name__ == "__main__":
    main()
