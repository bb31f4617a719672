"""Whole ``pgkb`` processes as a user, a script or an agent host waits for them, each variant
beside the others in the same run, interleaved run by run (A B C ..., then B C ... A), with the
load average before every run.

    python bench/fastpath.py commands --database-url URL [--runs 7] [--backends onnx,torch]
        [--tree main=DIR ...]
    python bench/fastpath.py ingest --pages DIR [--runs 3] [--backends onnx,torch]

``commands`` steps: ``search`` (hybrid) and ``search keyword`` (``--mode keyword``), ``ask``
(no chat model: the extractive answer), ``mcp`` (``pgkb mcp`` until its first ``search`` tool
call has answered, over stdio), ``serve`` (``pgkb serve`` until ``/healthz`` answers 200),
``quickstart`` (a second ``pgkb quickstart``, in ``--quickstart-data-dir``), each for every
embedding backend of ``--backends``, and ``search served``: ``pgkb search`` with
``PGKB_SERVE_URL`` pointing at a running ``pgkb serve``. ``--backends default`` leaves
``PGKB_EMBEDDING_BACKEND`` unset (what a user gets). ``--tree NAME=DIR`` adds every step again,
named ``[NAME]``, with ``DIR`` (another checkout, e.g. ``git worktree add DIR main``) first on
``PYTHONPATH``: the same installed libraries, that tree's ``loader`` package, interleaved
with this tree's steps (an A/B of two commits).

``ingest``: ``pgkb ingest DIR --json`` into a fresh database per run and backend; the embedding
throughput is ``embeddings_computed`` over the run's ``seconds.embed``.

Prints one JSON object (figures, environment) on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUERY = "How do I build an index without locking writes?"


def pgkb() -> list[str]:
    script = Path(sys.executable).with_name("pgkb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "loader.cli"]


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(url: str | None, backend: str, **more: str) -> dict[str, str]:
    env = {**os.environ, "PGKB_CHAT_MODEL": "", **more}
    if backend != "default":
        env["PGKB_EMBEDDING_BACKEND"] = backend
    if url:
        env["PGKB_DATABASE_URL"] = url
    return env


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"`{' '.join(command)}` exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def serve_ready(env: dict[str, str]) -> float:
    port = free_port()
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        process = subprocess.Popen(
            [*pgkb(), "serve", "--port", str(port)], env=env, stdout=log, stderr=log
        )
        try:
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"pgkb serve exited: {log.read()[-2000:]!r}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                        if r.status == 200:
                            return time.perf_counter() - started
                except OSError:
                    time.sleep(0.02)
        finally:
            process.terminate()
            process.wait(timeout=60)


def mcp_ready(env: dict[str, str]) -> float:
    """From the start of ``pgkb mcp`` to the answer of its first ``search`` tool call (the MCP
    stdio transport: JSON-RPC messages, one per line)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [*pgkb(), "mcp"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()

    def answer(wanted: int) -> dict[str, Any]:
        assert process.stdout is not None
        for line in process.stdout:
            message = json.loads(line)
            if message.get("id") == wanted:
                return dict(message)
        raise SystemExit("pgkb mcp closed its output")

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}})  # fmt: skip
        answer(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "search", "arguments": {"query": QUERY}}})  # fmt: skip
        reply = answer(2)
        seconds = time.perf_counter() - started
        if "error" in reply or reply.get("result", {}).get("isError"):
            raise SystemExit(f"pgkb mcp: the search tool failed: {reply}")
        return seconds
    finally:
        process.stdin.close()
        process.terminate()
        process.wait(timeout=60)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
        "runs": len(values),
    }


def interleave(steps: dict[str, Callable[[], float]], runs: int) -> dict[str, Any]:
    names = list(steps)
    times: dict[str, list[float]] = {n: [] for n in names}
    loads: list[float] = []
    for run in range(runs):
        order = names[run % len(names) :] + names[: run % len(names)]
        for name in order:
            loads.append(load())
            seconds = steps[name]()
            times[name].append(seconds)
            print(f"run {run + 1}: {name}: {seconds:.2f} s (load {loads[-1]:.1f})", file=sys.stderr)
    return {
        "steps": {n: summary(v) for n, v in times.items()},
        "load": summary(loads),
    }


def commands(args: argparse.Namespace) -> dict[str, Any]:
    url = args.database_url
    steps: dict[str, Callable[[], float]] = {}
    trees: list[tuple[str, dict[str, str]]] = [("", {})]
    for tree in args.tree:
        name, _, folder = tree.partition("=")
        trees.append((f" [{name}]", {"PYTHONPATH": str(Path(folder).resolve())}))
    for (tree_suffix, tree_env), backend in (
        (t, b) for t in trees for b in args.backends.split(",")
    ):
        env = env_for(url, backend, **tree_env)
        suffix = ("" if backend in ("onnx", "default") else f" ({backend})") + tree_suffix
        steps["search keyword" + suffix] = lambda e=env: timed(
            [*pgkb(), "search", QUERY, "--mode", "keyword"], e
        )
        steps["search" + suffix] = lambda e=env: timed([*pgkb(), "search", QUERY], e)
        steps["ask" + suffix] = lambda e=env: timed([*pgkb(), "ask", QUERY], e)
        steps["mcp" + suffix] = lambda e=env: mcp_ready(e)
        steps["serve" + suffix] = lambda e=env: serve_ready(e)
        if args.quickstart_data_dir:
            qs = env_for(None, backend, PGKB_DATA_DIR=str(args.quickstart_data_dir), **tree_env)
            qs.pop("PGKB_DATABASE_URL", None)
            steps["quickstart" + suffix] = lambda e=qs: timed([*pgkb(), "quickstart"], e)
    server = None
    if args.served:
        port = free_port()
        server = subprocess.Popen(
            [*pgkb(), "serve", "--port", str(port)],
            env=env_for(url, "onnx"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=5):
                    break
            except OSError:
                time.sleep(0.2)
        served = env_for(url, "onnx", PGKB_SERVE_URL=base)
        steps["search served"] = lambda: timed([*pgkb(), "search", QUERY], served)
    wanted = set(args.steps.split(",")) if args.steps else None
    if wanted:
        steps = {k: v for k, v in steps.items() if k.split(" (")[0].split(" [")[0] in wanted}
    try:
        for step in steps.values():  # one untimed warm-up each: caches, a built graph
            step()
        return interleave(steps, args.runs)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)


def ingest(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    admin = args.admin_url
    results: dict[str, list[float]] = {}
    loads: list[float] = []
    backends = args.backends.split(",")
    for run in range(args.runs):
        order = backends[run % len(backends) :] + backends[: run % len(backends)]
        for backend in order:
            name = f"pgkb_bench_ingest_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            url = admin.replace("/postgres?", f"/{name}?")
            try:
                env = env_for(url, backend)
                timed([*pgkb(), "db", "upgrade"], env)
                loads.append(load())
                done = subprocess.run(
                    [*pgkb(), "ingest", str(args.pages), "--json"],
                    env=env, capture_output=True, text=True,
                )  # fmt: skip
                report = json.loads(done.stdout)
                rate = report["embeddings_computed"] / report["seconds"]["embed"]
                results.setdefault(backend, []).append(rate)
                print(
                    f"run {run + 1}: {backend}: {report['embeddings_computed']} chunks, "
                    f"{rate:.2f} chunks/s (load {loads[-1]:.1f})",
                    file=sys.stderr,
                )
            finally:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    return {
        "chunks_per_second": {b: summary(v) for b, v in results.items()},
        "load": summary(loads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    c = sub.add_parser("commands")
    c.add_argument("--database-url", required=True, help="the knowledge base searched")
    c.add_argument("--quickstart-data-dir", type=Path, help="a data dir whose sample is ingested")
    c.add_argument("--runs", type=int, default=7)
    c.add_argument("--backends", default="onnx,torch")
    c.add_argument("--served", action="store_true", help="also search through PGKB_SERVE_URL")
    c.add_argument("--steps", help="only these steps (search,search keyword,ask,mcp,...)")
    c.add_argument(
        "--tree", action="append", default=[], help="NAME=DIR: the steps again on that checkout"
    )
    i = sub.add_parser("ingest")
    i.add_argument("--pages", type=Path, required=True, help="a folder of documents")
    i.add_argument("--admin-url", required=True, help="URL of the server's postgres database")
    i.add_argument("--runs", type=int, default=3)
    i.add_argument("--backends", default="onnx,torch")
    args = parser.parse_args()
    started = load()
    result = commands(args) if args.scenario == "commands" else ingest(args)
    result["environment"] = {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "load_at_start": started,
        "cpus": os.cpu_count(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
