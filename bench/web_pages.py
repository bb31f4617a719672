"""How long each page of ``pgkb serve``'s web interface takes on the server, warm, one client.

Serves the knowledge base of PGKB_DATABASE_URL (or the embedded one) as ``pgkb serve`` would,
in this process on an ephemeral port, asks every page ``--runs`` times after ``--warm`` unmeasured
requests, and prints per page the median and 95th percentile of the server's own time (the
``Server-Timing`` header each page carries: reading through the kb functions plus rendering) and
of the client's wall time (plus HTTP on 127.0.0.1). The pages are interleaved (A, B, C, A, B,
C ...), so a busy machine slows them alike. The load average is printed before and after.

    python bench/web_pages.py --runs 20
    python bench/web_pages.py --runs 20 --json > web.json
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


def _server_ms(response: Any) -> float:
    header = response.headers.get("server-timing", "")
    for part in header.split(","):
        name, _, rest = part.strip().partition(";dur=")
        if name == "total":
            return float(rest)
    raise SystemExit(f"no Server-Timing total for {response.request.url} ({response.status_code})")


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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    settings = load_settings().replace(chat_model=None)  # ask: retrieval and the extractive answer
    load_before = os.getloadavg()
    with psycopg.connect(database_url(settings, read=True)) as conn:
        register_vector(conn)
        measured = pages(conn)
    service = KnowledgeService(settings, pool_size=4).open()
    base, server, thread = start_server(create_app(service, token=None))
    results: dict[str, dict[str, list[float]]] = {
        n: {"server": [], "wall": []} for n, _ in measured
    }
    nodes: dict[str, int] = {}
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            for _ in range(args.warm):
                for _, path in measured:
                    client.get(path).raise_for_status()
            for _ in range(args.runs):
                for name, path in measured:
                    began = time.perf_counter()
                    response = client.get(path)
                    wall = (time.perf_counter() - began) * 1000
                    response.raise_for_status()
                    results[name]["server"].append(_server_ms(response))
                    results[name]["wall"].append(wall)
                    if name.startswith("graph"):
                        nodes[name] = len(re.findall(r'class="node[ "]', response.text))
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    load_after = os.getloadavg()

    def p95(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    rows = [
        {
            "page": name,
            "path": path,
            "server_p50_ms": round(statistics.median(results[name]["server"]), 1),
            "server_p95_ms": round(p95(results[name]["server"]), 1),
            "wall_p50_ms": round(statistics.median(results[name]["wall"]), 1),
            "wall_p95_ms": round(p95(results[name]["wall"]), 1),
            **({"nodes": nodes[name]} if name in nodes else {}),
        }
        for name, path in measured
    ]
    report = {
        "runs": args.runs,
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
    print(f"{'page':36} {'server p50':>10} {'p95':>7} {'wall p50':>9} {'p95':>7}")
    for row in rows:
        extra = f"  ({row['nodes']} nodes)" if "nodes" in row else ""
        print(f"{row['page']:36} {row['server_p50_ms']:>10.1f} {row['server_p95_ms']:>7.1f} "
              f"{row['wall_p50_ms']:>9.1f} {row['wall_p95_ms']:>7.1f}{extra}")  # fmt: skip


if __name__ == "__main__":
    main()
