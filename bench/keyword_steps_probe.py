"""A probe (deleted after use): where a call's time goes, statement by statement (auto_explain,
nested statements, durations only, no ANALYZE instrumentation), summed over N questions; the
calls interleaved question by question. Usage:

    python bench/keyword_steps_probe.py URL "SQL with %(q)s" ["SQL" ...] [--questions N]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("calls", nargs="+")
    p.add_argument("--questions", type=int, default=100)
    p.add_argument("--vectors", action="store_true", help="calls take %(v)s too")
    args = p.parse_args()
    texts = common.questions(args.url, args.questions)
    vectors = [None] * len(texts)
    if args.vectors:
        config = common.model_settings(args.url)
        vectors = common.embed(texts, config)
    notices: list[str] = []
    with psycopg.connect(args.url, autocommit=True) as conn:
        if args.vectors:
            from pgvector.psycopg import register_vector

            register_vector(conn)
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = notice")
        steps: dict[str, dict[str, list[float]]] = {c: defaultdict(list) for c in args.calls}
        totals: dict[str, list[float]] = {c: [] for c in args.calls}
        for q, v in list(zip(texts, vectors))[:20]:
            for c in args.calls:
                conn.execute(c, {"q": q, "v": v}).fetchall()
        for i, (q, v) in enumerate(zip(texts, vectors)):
            order = args.calls[i % len(args.calls):] + args.calls[: i % len(args.calls)]
            for c in order:
                conn.execute("SET auto_explain.log_min_duration = 0")
                notices.clear()
                conn.execute(c, {"q": q, "v": v}).fetchall()
                conn.execute("SET auto_explain.log_min_duration = -1")
                seen: dict[str, float] = defaultdict(float)
                for n in notices:
                    m = re.match(r"duration: ([0-9.]+) ms\s+plan:\s*Query Text:\s*(.*)", n, re.S)
                    if m:
                        key = re.sub(r"\s+", " ", m[2]).strip()[:70]
                        seen[key] += float(m[1])
                for key, ms in seen.items():
                    steps[c][key].append(ms)
                totals[c].append(max(seen.values()) if seen else 0.0)
        for c in args.calls:
            print(f"\n== {c}: top statement p50 {statistics.median(totals[c]):.3f} ms")
            for key, values in sorted(steps[c].items(), key=lambda kv: -sum(kv[1])):
                print(f"  {statistics.median(values):8.3f} ms p50  {sum(values)/len(texts):8.3f} ms mean/q  n={len(values):4d}  {key}")


if __name__ == "__main__":
    main()
