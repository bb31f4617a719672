"""Warm search latency through ``pgkb mcp`` (stdio) and ``pgkb serve`` (HTTP) beside the CLI's,
and requests per second with 8 concurrent clients.

    python bench/serve_bench.py --database-url URL [--queries 250] [--cli-queries 10]

Starts ``pgkb serve`` and ``pgkb mcp`` as subprocesses against URL (any role that may search:
the owner or a ``pgkb db grant --read`` role), warms each with 5 calls, then times every query
end to end from the client's side (query embedding, SQL, JSON, transport): the MCP ``search``
tool through the SDK's own client over stdio, and ``POST /v1/search`` over one keep-alive HTTP
connection. The CLI (``pgkb search QUERY --json``, a new process each time: interpreter start,
model load, connection) is timed on the first --cli-queries queries only, since each takes
seconds. Throughput: --clients concurrent clients (threads with their own HTTP connection; for
MCP, concurrent calls on one stdio session) sending the queries round-robin for --seconds.

Queries: the questions of eval/manual/questions-*.json, then eval/questions*.json, in file
order, the first --queries of them. For comparison, the same queries' embedding and
``kb.hybrid_search`` call are also timed in this process, without a server. Prints Markdown
tables, the commit and the database's size.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION_FILES = [
    "eval/manual/questions-tune.json",
    "eval/manual/questions-heldout.json",
    "eval/questions.json",
    "eval/questions-holdout.json",
]
CHECK = "How do I build an index without locking writes?"
PGKB = [sys.executable, "-c", "from loader.cli import main; main()"]


def questions(limit: int) -> list[str]:
    found: list[str] = []
    for name in QUESTION_FILES:
        found += [q["question"] for q in json.loads((ROOT / name).read_text())]
    return found[:limit]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def row(name: str, seconds: list[float], errors: int = 0) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"| {name} | {len(ms)} | {percentile(ms, 0.5):.1f} | {percentile(ms, 0.95):.1f} | "
        f"{statistics.fmean(ms):.1f} | {errors} |"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(process: subprocess.Popen[bytes], port: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the server did not start")


def bench_http(env: dict[str, str], texts: list[str], clients: int, seconds: float) -> list[str]:
    import httpx

    port = free_port()
    process = subprocess.Popen(
        [*PGKB, "serve", "--port", str(port), "--pool-size", str(clients)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(process, port)
        url = f"http://127.0.0.1:{port}/v1/search"
        with httpx.Client(timeout=60) as client:
            for text in texts[:5]:
                client.post(url, json={"query": text}).raise_for_status()
            times = []
            for text in texts:
                start = time.perf_counter()
                response = client.post(url, json={"query": text})
                times.append(time.perf_counter() - start)
                response.raise_for_status()
        done, errors = throughput_http(url, texts, clients, seconds)
        return [
            row("HTTP POST /v1/search (sequential)", times),
            f"| HTTP POST /v1/search, {clients} clients with their own connection | {seconds:g} | "
            f"{done} | {done / seconds:.1f} | {errors} |",
        ]
    finally:
        process.terminate()
        process.wait(timeout=30)


def throughput_http(url: str, texts: list[str], clients: int, seconds: float) -> tuple[int, int]:
    import httpx

    counts = [0] * clients
    errors = [0] * clients
    stop = time.monotonic() + seconds

    def worker(n: int) -> None:
        with httpx.Client(timeout=60) as client:
            i = n
            while time.monotonic() < stop:
                try:
                    ok = client.post(url, json={"query": texts[i % len(texts)]}).status_code == 200
                except httpx.HTTPError:
                    ok = False
                counts[n] += ok
                errors[n] += not ok
                i += clients

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts), sum(errors)


def bench_mcp(env: dict[str, str], texts: list[str], clients: int, seconds: float) -> list[str]:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=PGKB[0], args=[*PGKB[1:], "mcp", "--pool-size", str(clients)], env=env
    )
    lines: list[str] = []

    async def run() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            # what an agent does first: list the tools, ask, read the citations
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            answer = (await client.call_tool("ask", {"question": CHECK})).structured_content
            cited = [c["source_uri"] for c in (answer or {}).get("citations", [])]
            lines.append(f"MCP tools: {', '.join(tools)}; ask {CHECK!r} cites: {', '.join(cited)}")
            for text in texts[:5]:
                await client.call_tool("search", {"query": text})
            times = []
            errors = 0
            for text in texts:
                start = time.perf_counter()
                result = await client.call_tool("search", {"query": text})
                times.append(time.perf_counter() - start)
                errors += bool(result.is_error)
            lines.append(row("MCP search tool over stdio (sequential)", times, errors))
            done = [0, 0]
            stop = time.monotonic() + seconds

            async def worker(n: int) -> None:
                i = n
                while time.monotonic() < stop:
                    result = await client.call_tool("search", {"query": texts[i % len(texts)]})
                    done[bool(result.is_error)] += 1
                    i += clients

            async with anyio.create_task_group() as group:
                for n in range(clients):
                    group.start_soon(worker, n)
            lines.append(
                f"| MCP search, {clients} concurrent calls on one stdio session | {seconds:g} | "
                f"{done[0]} | {done[0] / seconds:.1f} | {done[1]} |"
            )

    anyio.run(run)
    return lines


def bench_cli(env: dict[str, str], texts: list[str]) -> list[str]:
    times = []
    errors = 0
    for text in texts:
        start = time.perf_counter()
        done = subprocess.run([*PGKB, "search", text, "--json"], env=env, capture_output=True)
        times.append(time.perf_counter() - start)
        errors += done.returncode != 0
    return [row("CLI `pgkb search --json` (new process each)", times, errors)]


def bench_in_process(url: str, texts: list[str]) -> list[str]:
    """The same work without a server: embed the query and call kb.hybrid_search in this
    process (what each server call costs before its transport)."""
    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.search import search
    from loader.settings import load_settings

    settings = load_settings(database_url=url)
    embedder = get_embedder(settings)
    embed_times, sql_times = [], []
    with connection(settings) as conn:
        conn.autocommit = True
        for text in texts[:5]:
            search(conn, text, embedder.embed_query(text), settings=settings)
        for text in texts:
            start = time.perf_counter()
            vector = embedder.embed_query(text)
            middle = time.perf_counter()
            search(conn, text, vector, settings=settings)
            sql_times.append(time.perf_counter() - middle)
            embed_times.append(middle - start)
    return [
        row("in process: embed the query (no server)", embed_times),
        row("in process: kb.hybrid_search round trip (no server)", sql_times),
    ]


def describe(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row_ = conn.execute("SELECT kb.stats(0)").fetchone()
    stats = row_[0] if row_ else {}
    model = (stats.get("active_model") or {}).get("name")
    return f"{stats.get('documents')} documents, {stats.get('chunks')} chunks, model {model}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--queries", type=int, default=250)
    parser.add_argument("--cli-queries", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    env = {**os.environ, "PGKB_DATABASE_URL": args.database_url, "PYTHONPATH": str(ROOT)}
    texts = questions(args.queries)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"commit {commit}; database: {describe(args.database_url)}; {len(texts)} queries; "
        f"{os.cpu_count()} CPUs",
        "",
        "| path | queries | p50 ms | p95 ms | mean ms | errors |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    mcp = bench_mcp(env, texts, args.clients, args.seconds)
    http = bench_http(env, texts, args.clients, args.seconds)
    lines.insert(0, mcp.pop(0))
    lines += [mcp[0], http[0], *bench_in_process(args.database_url, texts)]
    lines += bench_cli(env, texts[: args.cli_queries])
    lines += [
        "",
        "| throughput | seconds | requests | requests/s | errors |",
        "| --- | --- | --- | --- | --- |",
        mcp[1],
        http[1],
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
