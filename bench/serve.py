"""``serve``: what a warm server answers in, per request, from the client's side.

Starts ``pgkb serve`` (HTTP) and ``pgkb mcp`` (stdio, driven by the MCP SDK's own client) on
the knowledge base, warms each with 5 requests, then times N requests to each endpoint and tool
one after the other, end to end (the query's embedding, SQL, JSON, transport). The endpoints
are a table (``ENDPOINTS``): ``--endpoint "GET /path?q={q}"`` adds one (``{q}`` the URL-quoted
question; a POST sends ``{"query": question}``), so pages are measured like the JSON API.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common, corpus

ENDPOINTS: dict[str, Callable[[str], dict[str, Any] | None]] = {
    "POST /v1/search": lambda q: {"query": q},
    "POST /v1/embeddings": lambda q: {"input": q},
}
TOOLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "search": lambda q: {"query": q},
    "ask": lambda q: {"question": q},
}
WARM = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    corpus.add_options(parser, sizes="source")
    parser.add_argument("--queries", type=int, default=100, help="requests per endpoint")
    parser.add_argument("--questions", type=Path, action="append", default=[])
    parser.add_argument("--endpoint", action="append", default=[], metavar="'METHOD PATH'")
    parser.add_argument("--tools", default="search", help=f"MCP tools timed, of {','.join(TOOLS)}")


def pgkb() -> list[str]:
    """The pgkb command of this interpreter's environment (what a user runs)."""
    script = Path(sys.executable).with_name("pgkb")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from loader.cli import main; main()"]


def environment(url: str) -> dict[str, str]:
    return {**os.environ, "PGKB_DATABASE_URL": url}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http(url: str) -> tuple[subprocess.Popen[bytes], str, float]:
    """``pgkb serve`` on a free port: the process, its base URL, and the seconds until
    /healthz answered 200."""
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        process = subprocess.Popen(
            [*pgkb(), "serve", "--port", str(port)],
            env=environment(url),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.seek(0)
                error = log.read().decode(errors="replace")[-2000:]
                raise SystemExit(f"pgkb serve exited with {process.returncode}: {error}")
            try:
                if httpx.get(base + "/healthz", timeout=5).status_code == 200:
                    return process, base, time.perf_counter() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    stop(process)
    raise SystemExit("pgkb serve did not answer /healthz within 10 minutes")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def mcp_server(url: str, log: Any) -> Any:
    """``pgkb mcp`` over stdio, for the MCP SDK's client; its stderr goes to ``log``."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command = pgkb()
    params = StdioServerParameters(
        command=command[0], args=[*command[1:], "mcp"], env=environment(url)
    )
    return stdio_client(params, errlog=log)


def run(args: Any) -> dict[str, Any]:
    run = common.Run("serve", args)
    endpoints = dict(ENDPOINTS)
    for text in args.endpoint:
        method, _, path = text.strip().partition(" ")
        if method not in ("GET", "POST") or not path.startswith("/"):
            raise SystemExit(f"--endpoint {text!r}: write 'GET /path?q={{q}}' or 'POST /path'")
        endpoints[f"{method} {path.strip()}"] = (
            (lambda q: {"query": q}) if method == "POST" else (lambda q: None)
        )
    tools = args.tools.split(",")
    if unknown := set(tools) - set(TOOLS):
        raise SystemExit(
            f"--tools: unknown {', '.join(sorted(unknown))}; known: {', '.join(TOOLS)}"
        )
    figures: dict[str, Any] = {"corpora": {}}
    rows = []
    for label, url, _ in corpus.targets(args):
        run.postgres(url)
        texts = common.questions(url, args.queries + WARM, args.questions)
        result = {"http": http(url, endpoints, texts), "mcp": mcp(url, tools, texts)}
        figures["corpora"][label] = result
        for kind in ("http", "mcp"):
            for name, f in result[kind].items():
                rows.append([label, name, f["n"], f["p50"], f["p95"], f["p99"], f["errors"]])
    run.table(
        "Warm servers, ms per request end to end, one client",
        ["corpus", "request", "n", "p50", "p95", "p99", "errors"],
        rows,
    )
    return run.finish(figures)


def http(url: str, endpoints: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    import httpx

    process, base, _ = start_http(url)
    out = {}
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            for name, body in endpoints.items():
                method, path = name.split(" ", 1)
                times, errors = [], 0
                for i, text in enumerate(texts):
                    target = path.replace("{q}", urllib.parse.quote(text))
                    started = time.perf_counter()
                    status = client.request(method, target, json=body(text)).status_code
                    if i >= WARM:
                        times.append((time.perf_counter() - started) * 1000)
                        errors += status != 200
                out[name] = {**common.summary(times), "errors": errors}
    finally:
        stop(process)
    return out


def mcp(url: str, tools: list[str], texts: list[str]) -> dict[str, Any]:
    import anyio
    from mcp import Client

    out: dict[str, Any] = {}

    async def session() -> None:
        async with Client(mcp_server(url, log), read_timeout_seconds=600) as client:
            for tool in tools:
                times, errors = [], 0
                for i, text in enumerate(texts):
                    started = time.perf_counter()
                    result = await client.call_tool(tool, TOOLS[tool](text))
                    if i >= WARM:
                        times.append((time.perf_counter() - started) * 1000)
                        errors += bool(result.is_error)
                out[f"MCP {tool}"] = {**common.summary(times), "errors": errors}

    with tempfile.TemporaryFile("w+") as log:
        anyio.run(session)
    return out
