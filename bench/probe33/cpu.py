# ruff: noqa
"""A probe (deleted after use): calls interleaved question by question; backend CPU ms (schedstat) and server ms per
call; top-20 equality of each call against the first. Usage:
    python bench/probe33/cpu.py URL bench/probe33/calls.json [--questions N] [--words N]
calls.json: [{"name":..., "sql":... (%(q)s, %(v)s), "set": {"guc": "value"}, "ref": NAME}, ...]
(a call with "ref" is compared with that call on the questions and the N most frequent lexemes)"""

import argparse
import json
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from bench import common, latency


def run_ms(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e6


p = argparse.ArgumentParser()
p.add_argument("url")
p.add_argument("calls")
p.add_argument("--questions", type=int, default=300)
p.add_argument("--timing", type=int, default=1, help="1: time, 0: only equality")
p.add_argument("--words", type=int, default=100, help="frequent lexemes added for equality")
a = p.parse_args()
calls = json.load(open(a.calls))
texts = common.questions(a.url, a.questions)
conn = psycopg.connect(a.url, autocommit=True)
from pgvector.psycopg import register_vector

register_vector(conn)
words10 = latency.frequent_words(conn, 10)
vecs = common.embed(texts + words10, common.model_settings(a.url))
items = list(zip(texts, vecs[: len(texts)]))
pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def setall(c, on):
    for k, v in c.get("set", {}).items():
        conn.execute("SELECT set_config(%s, %s, false)", (k, v if on else ""))


def rows(c, q, v):
    setall(c, True)
    try:
        return conn.execute(c["sql"], {"q": q, "v": v}).fetchall()
    finally:
        setall(c, False)


load = [common.load_average()]
if a.timing:
    for q, v in items[:20]:
        for c in calls:
            rows(c, q, v)
    cpu = {c["name"]: [] for c in calls}
    srv = {c["name"]: [] for c in calls}
    for i, (q, v) in enumerate(items):
        order = calls[i % len(calls) :] + calls[: i % len(calls)]
        for c in order:
            setall(c, True)
            b = run_ms(pid)
            conn.execute(c["sql"], {"q": q, "v": v}).fetchall()
            cpu[c["name"]].append(run_ms(pid) - b)
            srv[c["name"]].append(common.server_ms(conn, c["sql"], {"q": q, "v": v}))
            setall(c, False)
    load.append(common.load_average())
    print(f"questions {len(items)}, load {load}")
    print("| call | CPU p50 | p95 | p99 | server p50 | p95 | p99 |\n|---|---|---|---|---|---|---|")
    for c in calls:
        x, s = common.summary(cpu[c["name"]]), common.summary(srv[c["name"]])
        print(
            f"| {c['name']} | {x['p50']} | {x['p95']} | {x['p99']} | {s['p50']} | {s['p95']} | {s['p99']} |"
        )
if a.words:
    wl = [
        r[0]
        for r in conn.execute(
            "SELECT lexeme FROM kb.term_stats ORDER BY df DESC, lexeme LIMIT %s", (a.words,)
        )
    ]
    eq_items = items + [(w, None) for w in wl if w not in texts]
else:
    eq_items = items
byname = {c["name"]: c for c in calls}
for c in calls:
    if "ref" not in c:
        continue
    ref = byname[c["ref"]]
    same = ids = top10 = 0
    n = 0
    for q, v in eq_items:
        if v is None and "%(v)s" in c["sql"]:
            continue
        n += 1
        r0, r1 = rows(ref, q, v), rows(c, q, v)
        k0, k1 = [r[:2] for r in r0], [r[:2] for r in r1]
        same += r0 == r1
        ids += k0 == k1
        top10 += k0[:10] == k1[:10]
    print(
        f"{c['name']} vs {ref['name']}: {n} texts, rows equal {same}, ids+ranks equal {ids}, top 10 equal {top10}",
        flush=True,
    )
