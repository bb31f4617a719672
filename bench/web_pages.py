"""How long each page of ``pgkb serve``'s web interface takes on the server, warm, one client.

Serves the knowledge base of PGKB_DATABASE_URL (or the embedded one) as ``pgkb serve`` would,
in this process on an ephemeral port, asks every page ``--runs`` times after ``--warm`` unmeasured
requests, and prints per page the median and 95th percentile of the server's own time (the
``Server-Timing`` header each page carries: ``read``, the database work through the kb functions,
plus ``render``, the template) and of the client's wall time (plus HTTP on 127.0.0.1). The pages
are interleaved (A, B, C, A, B, C ...), so a busy machine slows them alike. The load average is
printed before and after.

``--url NAME=URL`` (twice or more) measures servers already running instead (``pgkb serve`` of
two commits over two copies of one database, say): every page is asked of each server in turn,
request by request, so both see the same machine. The pages are chosen from PGKB_DATABASE_URL,
which must hold the same documents as the servers (the ids are in the paths).

    python bench/web_pages.py --runs 20
    python bench/web_pages.py --runs 20 --json > web.json
    python bench/web_pages.py --runs 20 --url before=http://127.0.0.1:8101 \\
        --url after=http://127.0.0.1:8102
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import urllib.parse
from typing import Any


def server_timing(response: Any) -> dict[str, float]:
    """The ``Server-Timing`` durations of a page: read, render, total (ms)."""
    found: dict[str, float] = {}
    for part in response.headers.get("server-timing", "").split(","):
        name, _, rest = part.strip().partition(";dur=")
        if rest:
            found[name] = float(rest)
    if "total" not in found:
        raise SystemExit(
            f"no Server-Timing total for {response.request.url} ({response.status_code})"
        )
    return found


def pages(conn: Any) -> list[tuple[str, str]]:
    """(name, path) of the pages measured, chosen from the knowledge base itself: the document
    with the most chunks, the one with the most relations, a word of a title."""
    from loader.db import queries

    biggest = conn.execute(
        "SELECT document_id, chunk_count FROM kb.document_page(page_size => 500) "
        "ORDER BY chunk_count DESC LIMIT 1"
    ).fetchone()
    connected = conn.execute(
        "SELECT document_id FROM kb.explore_graph(max_results => 1)"
    ).fetchone()
    total = conn.execute(queries.DOCUMENT_TOTAL, {"filters": "{}"}).fetchone()
    if biggest is None or connected is None or total is None:
        raise SystemExit("the knowledge base is empty: ingest something first")
    middle = max(1, int(total[0]) // 50 // 2)
    doc, hub = biggest[0], connected[0]
    q = urllib.parse.quote
    return [
        ("documents", "/"),
        (f"documents page {middle}", f"/?page={middle}"),
        ("documents, words + sort", "/?q=index&sort=updated"),
        ("documents, type filter", "/?type=reference"),
        (f"document ({biggest[1]} chunks)", f"/documents/{doc}"),
        ("document, a range", f"/documents/{doc}?start=10&end=20"),
        ("graph, 1 hop", f"/graph?doc={hub}&depth=1"),
        ("graph, 2 hops", f"/graph?doc={hub}&depth=2"),
        ("graph, 3 hops", f"/graph?doc={hub}&depth=3"),
        ("graph, catalogue", "/graph"),
        ("search, hybrid", "/search?q=" + q("build an index without locking writes")),
        ("search, keyword", "/search?mode=keyword&q=" + q("vacuum freeze")),
        ("ask (no chat model)", "/ask?q=" + q("How do I build an index without locking writes?")),
        ("status", "/status"),
    ]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def measure(
    clients: dict[str, Any], measured: list[tuple[str, str]], runs: int, warm: int
) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Each page of ``measured`` asked of each client in turn, ``warm`` times unmeasured then
    ``runs`` times: per (server, page) the server's total, read and render and the wall time."""
    results: dict[tuple[str, str], dict[str, list[float]]] = {
        (s, n): {"total": [], "read": [], "render": [], "wall": [], "nodes": []}
        for s in clients
        for n, _ in measured
    }
    for _ in range(warm):
        for _, path in measured:
            for client in clients.values():
                client.get(path).raise_for_status()
    for _ in range(runs):
        for name, path in measured:
            for server, client in clients.items():
                began = time.perf_counter()
                response = client.get(path)
                wall = (time.perf_counter() - began) * 1000
                response.raise_for_status()
                timing = server_timing(response)
                into = results[(server, name)]
                into["total"].append(timing["total"])
                into["read"].append(timing.get("read", 0.0))
                into["render"].append(timing.get("render", 0.0))
                into["wall"].append(wall)
                if name.startswith("graph"):
                    into["nodes"].append(len(re.findall(r'class="node[ "]', response.text)))
    return results


def main() -> None:
    import httpx
    import psycopg

    from loader.db.connect import database_url, register_vector
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService
    from loader.settings import load_settings
    from tests.web.conftest import start_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--url", action="append", default=[], metavar="NAME=URL")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    settings = load_settings().replace(chat_model=None)  # ask: retrieval and the extractive answer
    load_before = os.getloadavg()
    with psycopg.connect(database_url(settings, read=True)) as conn:
        register_vector(conn)
        measured = pages(conn)
    servers: dict[str, str] = {}
    for item in args.url:
        name, sep, base = item.partition("=")
        if not sep or not base.startswith("http"):
            raise SystemExit(f"--url takes NAME=URL, got {item!r}")
        servers[name] = base
    running = None
    if not servers:
        service = KnowledgeService(settings, pool_size=4).open()
        base, instance, thread = start_server(create_app(service, token=None))
        servers["this"] = base
        running = (instance, thread)
    clients = {s: httpx.Client(base_url=b, timeout=120) for s, b in servers.items()}
    try:
        results = measure(clients, measured, args.runs, args.warm)
    finally:
        for client in clients.values():
            client.close()
        if running is not None:
            running[0].should_exit = True
            running[1].join(timeout=30)
    load_after = os.getloadavg()

    rows = []
    for name, path in measured:
        for server in servers:
            got = results[(server, name)]
            rows.append(
                {
                    "page": name,
                    "server": server,
                    "path": path,
                    "server_p50_ms": round(statistics.median(got["total"]), 1),
                    "server_p95_ms": round(_p95(got["total"]), 1),
                    "read_p50_ms": round(statistics.median(got["read"]), 1),
                    "render_p50_ms": round(statistics.median(got["render"]), 1),
                    "wall_p50_ms": round(statistics.median(got["wall"]), 1),
                    "wall_p95_ms": round(_p95(got["wall"]), 1),
                    **({"nodes": got["nodes"][-1]} if got["nodes"] else {}),
                }
            )
    report = {
        "runs": args.runs,
        "servers": servers if args.url else {},
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "pages": rows,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return
    print(f"{args.runs} runs per page, interleaved; load average before {load_before[0]:.2f}, "
          f"after {load_after[0]:.2f}")  # fmt: skip
    several = len(servers) > 1
    head = f"{'page':34} " + (f"{'server':8} " if several else "")
    columns = ("total p50", 9), ("p95", 7), ("read", 7), ("render", 7), ("wall p50", 9), ("p95", 7)
    print(head + " ".join(f"{name:>{width}}" for name, width in columns))
    for row in rows:
        extra = f"  ({row['nodes']} nodes)" if "nodes" in row else ""
        who = f"{row['server']:8} " if several else ""
        print(f"{row['page']:34} {who}{row['server_p50_ms']:>9.1f} {row['server_p95_ms']:>7.1f} "
              f"{row['read_p50_ms']:>7.1f} {row['render_p50_ms']:>7.1f} "
              f"{row['wall_p50_ms']:>9.1f} {row['wall_p95_ms']:>7.1f}{extra}")  # fmt: skip


if __name__ == "__main__":
    main()
