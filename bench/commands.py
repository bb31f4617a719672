"""``commands``: whole ``pgkb`` processes, as a user, a script or an agent host waits for them.

Each step is timed from the process's start (interpreter, imports, model, connection, work)
to its answer, ``--runs`` times, the steps interleaved run by run (A B C ..., B C ... A) so the
machine's load falls on all alike; reported as min / median / max seconds:

- ``search``: ``pgkb search QUERY`` (hybrid), beside ``search keyword``: ``--mode keyword``;
- ``ask``: ``pgkb ask QUESTION`` without a chat model (PGKB_CHAT_MODEL empty: the extractive
  answer);
- ``mcp``: ``pgkb mcp`` until its first ``search`` tool call has answered (over stdio);
- ``serve``: ``pgkb serve`` until ``/healthz`` answers 200;
- ``quickstart``: a second ``pgkb quickstart`` (the first, untimed, ingests the sample into the
  database ``pgkb_bench_quickstart`` beside the knowledge base measured, kept for later runs).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from bench import common, corpus, serve

QUERY = "How do I build an index without locking writes?"
STEPS = ("search", "search keyword", "ask", "mcp", "serve", "quickstart")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    corpus.add_options(parser, sizes="source")
    parser.add_argument("--runs", type=int, default=5, help="runs of each step")
    parser.add_argument("--query", default=QUERY, help="the search query and the question asked")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"of {','.join(STEPS)}")


def process(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"`{' '.join(command)}` exited with {done.returncode}: {done.stderr[-2000:]}"
        )
    return seconds


def mcp_ready(url: str, query: str) -> float:
    import anyio
    from mcp import Client

    async def first_call() -> float:
        started = time.perf_counter()
        async with Client(serve.mcp_server(url, log), read_timeout_seconds=600) as client:
            result = await client.call_tool("search", {"query": query})
            seconds = time.perf_counter() - started
        if result.is_error:
            raise SystemExit(f"pgkb mcp: the search tool failed: {result.content}")
        return seconds

    with tempfile.TemporaryFile("w+") as log:
        return anyio.run(first_call)


def serve_ready(url: str) -> float:
    process, _, seconds = serve.start_http(url)
    serve.stop(process)
    return seconds


def quickstart_database(url: str) -> str:
    """The demo database of the quickstart step, beside the knowledge base at ``url``."""
    demo = common.with_dbname(url, "pgkb_bench_quickstart")
    with psycopg.connect(common.with_dbname(url, "postgres"), autocommit=True) as conn:
        if not conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = 'pgkb_bench_quickstart'"
        ).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {}").format(sql.Identifier("pgkb_bench_quickstart"))
            )
    return demo


def steps(url: str, query: str, chosen: list[str]) -> dict[str, Callable[[Any], float]]:
    env = {**serve.environment(url), "PGKB_CHAT_MODEL": ""}
    pgkb = serve.pgkb()
    available: dict[str, Callable[[Any], float]] = {
        "search": lambda _: process([*pgkb, "search", query], env),
        "search keyword": lambda _: process([*pgkb, "search", query, "--mode", "keyword"], env),
        "ask": lambda _: process([*pgkb, "ask", query], env),
        "mcp": lambda _: mcp_ready(url, query),
        "serve": lambda _: serve_ready(url),
    }
    if "quickstart" in chosen:
        quickstart = [*pgkb, "quickstart", "--demo-url", quickstart_database(url)]
        print("pgkb quickstart, first run (untimed)", flush=True)
        process(quickstart, env)
        available["quickstart"] = lambda _: process(quickstart, env)
    return {name: available[name] for name in chosen}


def run(args: Any) -> dict[str, Any]:
    run = common.Run("commands", args)
    chosen = args.steps.split(",")
    if unknown := set(chosen) - set(STEPS):
        raise SystemExit(
            f"--steps: unknown {', '.join(sorted(unknown))}; known: {', '.join(STEPS)}"
        )
    if args.runs < 1:
        raise SystemExit("--runs: at least 1")
    figures: dict[str, Any] = {"corpora": {}}
    rows = []
    for label, url, _ in corpus.targets(args):
        run.postgres(url)
        timed = common.interleaved(range(args.runs), steps(url, args.query, chosen))
        result = {name: common.spread(values) for name, values in timed.items()}
        if "search" in result and "search keyword" in result:
            ratio = result["search"]["median"] / result["search keyword"]["median"]
            result["search"]["x_keyword"] = round(ratio, 2)
        figures["corpora"][label] = result
        for name, f in result.items():
            rows.append(
                [label, name, f["n"], f["min"], f["median"], f["max"], f.get("x_keyword", "")]
            )
    run.table(
        "Whole processes, seconds",
        ["corpus", "step", "runs", "min", "median", "max", "x keyword"],
        rows,
    )
    return run.finish(figures)
