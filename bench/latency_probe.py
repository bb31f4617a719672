"""The keyword leg and the fusion, timed by the server, variants interleaved query by query, and
taken apart per step.

    python bench/latency_probe.py time URL [URL ...] --variants kb,kbx_0018 --queries 300
    python bench/latency_probe.py steps URL --variant kb --queries 300
    python bench/latency_probe.py install URL --revisions 0011,0012,0013,0015,0017

``time``: for every query, every variant's kb.keyword_search and kb.hybrid_search (and the
vector leg once) are called once unmeasured, then timed once each (the server's Execution Time
of EXPLAIN (ANALYZE, TIMING OFF)); variants alternate query by query and the databases run one
after the other per query, so a load that comes and goes falls on all alike. p50 / p95 / p99
per call, with the load average before and after, and the common words ('chapter', 'table',
'function', 'data') best of three against the queries' median.

``steps``: the same calls under auto_explain (nested statements, ANALYZE, BUFFERS): every
statement a function runs is a step; per step the median and p95 of its duration and its shared
buffers over the queries.

``install``: each revision's keyword_search, hybrid_search, query_terms and term_df (as the
function store holds them at that revision) created in schema kbx_<revision>, calling each other
there and reading kb's tables, so an earlier version runs on today's data.

Queries: the evaluation questions (bundled, bundled held-out, the whole manual's four halves),
distinct, in that order; vectors from the active model of the first URL's database (cached in
--cache).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["chapter", "table", "function", "data"]
QUESTION_FILES = [
    "questions.json",
    "questions-holdout.json",
    "manual/questions-tune.json",
    "manual/questions-heldout.json",
    "manual/questions-b-tune.json",
    "manual/questions-b-heldout.json",
]
FUNCTIONS = ["keyword_search", "hybrid_search", "query_terms", "term_df"]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def questions(n: int) -> list[str]:
    texts: list[str] = []
    for name in QUESTION_FILES:
        data = json.loads((ROOT / "eval" / name).read_text(encoding="utf-8"))
        items = data["questions"] if isinstance(data, dict) else data
        texts += [q["question"] for q in items if isinstance(q, dict) and q.get("question")]
    seen: set[str] = set()
    return [t for t in texts if not (t in seen or seen.add(t))][:n]


def vectors(url: str, texts: list[str], cache: Path) -> list[str]:
    known = json.loads(cache.read_text()) if cache.exists() else {}
    missing = [t for t in texts if t not in known]
    if missing:
        from loader.providers.embeddings import get_embedder
        from loader.settings import load_settings

        embedder = get_embedder(load_settings(database_url=url))
        for text, vector in zip(missing, embedder.embed(missing), strict=True):
            known[text] = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
        cache.write_text(json.dumps(known))
    return [known[t] for t in texts]


def server_ms(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> float:
    row = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    return float(row[0][0]["Execution Time"])


def calls(schema: str) -> dict[str, str]:
    return {
        "keyword": f"SELECT * FROM {schema}.keyword_search(%(q)s, 20)",
        "hybrid": f"SELECT * FROM {schema}.hybrid_search(%(q)s, %(v)s::vector)",
    }


def backend_cpu_ms(
    conn: psycopg.Connection[Any], pid: int, sql: str, params: dict[str, Any]
) -> float:
    """The backend's CPU time for one call (its schedstat run time, read before and after):
    on a shared machine, what the call costs without the time it waited for a core."""
    with open(f"/proc/{pid}/schedstat") as f:
        before = int(f.read().split()[0])
    conn.execute(sql, params).fetchall()
    with open(f"/proc/{pid}/schedstat") as f:
        return (int(f.read().split()[0]) - before) / 1e6


def time_run(specs: list[str], variants: list[str], texts: list[str], vecs: list[str]) -> None:
    """specs: URL, or URL#schema,schema for variants of that database only."""
    urls = [spec.split("#")[0] for spec in specs]
    schemas = {u: (spec.split("#")[1].split(",") if "#" in spec else variants)
               for u, spec in zip(urls, specs, strict=True)}  # fmt: skip
    conns = [psycopg.connect(u, autocommit=True) for u in urls]
    pids = [int(c.execute("SELECT pg_backend_pid()").fetchone()[0]) for c in conns]  # type: ignore[index]
    cpu: dict[tuple[str, str], list[float]] = {}
    names = [f"{Path(u.split('?')[0]).name}:{v}" for u in urls for v in schemas[u]]
    times: dict[tuple[str, str], list[float]] = {}
    before = load()
    started = time.time()
    for url, conn in zip(urls, conns, strict=True):  # one unmeasured pass: caches and plans warm
        for q, v in zip(texts, vecs, strict=True):
            for schema in schemas[url]:
                for sql in calls(schema).values():
                    conn.execute(sql, {"q": q, "v": v}).fetchall()
    for q, v in zip(texts, vecs, strict=True):
        for url, conn, pid in zip(urls, conns, pids, strict=True):
            for schema in schemas[url]:
                name = f"{Path(url.split('?')[0]).name}:{schema}"
                for leg, sql in calls(schema).items():
                    cpu.setdefault((name, leg), []).append(
                        backend_cpu_ms(conn, pid, sql, {"q": q, "v": v})
                    )
                    times.setdefault((name, leg), []).append(server_ms(conn, sql, {"q": q, "v": v}))
            vsql = "SELECT * FROM kb.vector_search(%(v)s::vector, 20)"
            times.setdefault((Path(url.split("?")[0]).name + ":kb", "vector"), []).append(
                server_ms(conn, vsql, {"v": v})
            )
    common: dict[str, list[float]] = {}
    for url, conn in zip(urls, conns, strict=True):
        for schema in schemas[url]:
            name = f"{Path(url.split('?')[0]).name}:{schema}"
            sql = calls(schema)["keyword"]
            common[name] = [min(server_ms(conn, sql, {"q": w}) for _ in range(3)) for w in COMMON]
    after = load()
    print(f"{len(texts)} queries, load {before} -> {after}, {time.time() - started:.0f} s")
    print("| database:variant | call | p50 ms | p95 ms | p99 ms | mean ms | CPU p50 / p95 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (name, leg), t in sorted(times.items()):
        c = cpu.get((name, leg))
        cpu_text = f"{percentile(c, 0.5):.2f} / {percentile(c, 0.95):.2f}" if c else "-"
        print(
            f"| {name} | {leg} | {percentile(t, 0.5):.2f} | {percentile(t, 0.95):.2f} | "
            f"{percentile(t, 0.99):.2f} | {statistics.fmean(t):.2f} | {cpu_text} |"
        )
    print("\ncommon words, keyword leg, best of three (ms), against the queries' keyword p50:")
    for name in names:
        p50 = percentile(times[(name, "keyword")], 0.5)
        words = ", ".join(f"{w} {t:.1f}" for w, t in zip(COMMON, common[name], strict=True))
        print(f"  {name}: {words}; max / p50 = {max(common[name]) / p50:.2f}")
    for conn in conns:
        conn.close()


STEP = re.compile(r"duration: ([0-9.]+) ms\s+plan:\s*Query Text: (.*?)\n(.*)", re.S)
BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")


def label(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:110]


def steps_run(url: str, variant: str, texts: list[str], vecs: list[str]) -> None:
    conn = psycopg.connect(url, autocommit=True)
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    for sql in calls(variant).values():  # warm
        for q, v in zip(texts, vecs, strict=True):
            conn.execute(sql, {"q": q, "v": v}).fetchall()
    conn.execute("LOAD 'auto_explain'")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_analyze = on",
        "auto_explain.log_buffers = on",
        "auto_explain.log_timing = on",
        "auto_explain.log_level = notice",
    ):
        conn.execute("SET " + setting)
    before = load()
    for leg, sql in calls(variant).items():
        per_step: dict[str, list[tuple[float, int]]] = {}
        order: list[str] = []
        for q, v in zip(texts, vecs, strict=True):
            notices.clear()
            conn.execute(sql, {"q": q, "v": v}).fetchall()
            for n in notices:
                m = STEP.search(n)
                if not m:
                    continue
                ms, query, plan = float(m.group(1)), m.group(2), m.group(3)
                b = BUFFERS.search(plan)
                buffers = (int(b.group(1) or 0) + int(b.group(2) or 0)) if b else 0
                key = label(query)
                if key not in per_step:
                    order.append(key)
                per_step.setdefault(key, []).append((ms, buffers))
        print(f"\n{variant}.{leg}: {len(texts)} queries, load {before} -> {load()}")
        print("| step (statement, first words) | runs | p50 ms | p95 ms | buffers p50 |")
        print("| --- | --- | --- | --- | --- |")
        for key in order:
            values = per_step[key]
            ms = [x for x, _ in values]
            bufs = [b for _, b in values]
            print(
                f"| `{key}` | {len(values)} | {percentile(ms, 0.5):.3f} | "
                f"{percentile(ms, 0.95):.3f} | {percentile([float(b) for b in bufs], 0.5):.0f} |"
            )
    conn.close()


def stored_function(name: str, revision: str) -> str | None:
    """kb.<name> as the chain left it at ``revision``: its newest file of the function store
    (alembic/functions/<name>/<rev>.sql) written at or before it; None when it had none then
    or the newest one is a drop."""
    folder = ROOT / "alembic" / "functions" / name
    files = sorted(p for p in folder.glob("*.*") if p.stem <= revision) if folder.is_dir() else []
    if not files or files[-1].suffix != ".sql":
        return None
    return files[-1].read_text(encoding="utf-8")


def install(url: str, revisions: list[str]) -> None:
    """kbx_<rev>: each of FUNCTIONS as the chain left it at <rev>."""
    with psycopg.connect(url, autocommit=True) as conn:
        for revision in revisions:
            schema = f"kbx_{revision}"
            texts = {n: t for n in FUNCTIONS if (t := stored_function(n, revision)) is not None}
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"CREATE SCHEMA {schema}")
            conn.execute("SET check_function_bodies = off")
            for text in texts.values():
                for other in FUNCTIONS:
                    text = text.replace(f"kb.{other}(", f"{schema}.{other}(")
                # only the CREATE and its COMMENT: no grants
                conn.execute(text.split("\nREVOKE ")[0])
            print(schema, sorted(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["time", "steps", "install"])
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--variants", default="kb")
    parser.add_argument("--revisions", default="0011,0012,0013,0015,0017,0018")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--cache", type=Path, default=Path("probe-vectors.json"))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.what == "install":
        for url in args.urls:
            install(url, args.revisions.split(","))
        return
    texts = questions(args.queries)
    vecs = vectors(args.urls[0].split("#")[0], texts, args.cache)
    if args.what == "time":
        time_run(args.urls, args.variants.split(","), texts, vecs)
    else:
        for variant in args.variants.split(","):
            steps_run(args.urls[0], variant, texts, vecs)


if __name__ == "__main__":
    main()
