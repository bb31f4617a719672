"""A probe (deleted after use): calls timed interleaved question by question, each by the
backend's CPU time (its /proc schedstat run time around the call: what the call itself costs,
whatever the machine's load) and by the server's time (EXPLAIN ANALYZE, TIMING OFF). Usage:

    python bench/keyword_cpu_probe.py URL NAME=[URL#]SQL [NAME=SQL ...] [--questions N] [--vectors]

(a call with URL# runs on that database, the others on URL; the questions come from URL)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common  # noqa: E402


def run_ms(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("calls", nargs="+")
    p.add_argument("--questions", type=int, default=300)
    p.add_argument("--vectors", action="store_true")
    args = p.parse_args()
    calls = dict(c.split("=", 1) for c in args.calls)
    texts = common.questions(args.url, args.questions)
    vectors: list = [None] * len(texts)
    if args.vectors:
        vectors = common.embed(texts, common.model_settings(args.url))
    load = [common.load_average()]
    urls = {n: (c.split("#", 1)[0] if "#" in c else args.url) for n, c in calls.items()}
    calls = {n: c.split("#", 1)[1] if "#" in c else c for n, c in calls.items()}
    conns = {u: psycopg.connect(u, autocommit=True) for u in set(urls.values())}
    if args.vectors:
        from pgvector.psycopg import register_vector

        for c in conns.values():
            register_vector(c)
    pids = {u: c.execute("SELECT pg_backend_pid()").fetchone()[0] for u, c in conns.items()}
    if True:
        for q, v in list(zip(texts, vectors))[:20]:
            for n, sql in calls.items():
                conns[urls[n]].execute(sql, {"q": q, "v": v}).fetchall()
        cpu: dict[str, list[float]] = {n: [] for n in calls}
        server: dict[str, list[float]] = {n: [] for n in calls}
        names = list(calls)
        for i, (q, v) in enumerate(zip(texts, vectors)):
            for n in names[i % len(names):] + names[: i % len(names)]:
                conn, pid = conns[urls[n]], pids[urls[n]]
                before = run_ms(pid)
                conn.execute(calls[n], {"q": q, "v": v}).fetchall()
                cpu[n].append(run_ms(pid) - before)
                server[n].append(common.server_ms(conn, calls[n], {"q": q, "v": v}))
    load.append(common.load_average())
    print(f"questions {len(texts)}, load average {load[0]} -> {load[1]}")
    print("| call | CPU p50 | p95 | p99 | server p50 | p95 | p99 |")
    for n in names:
        c, s = common.summary(cpu[n]), common.summary(server[n])
        print(f"| {n} | {c['p50']} | {c['p95']} | {c['p99']} | {s['p50']} | {s['p95']} | {s['p99']} |")


if __name__ == "__main__":
    main()
