"""Hybrid search restricted to a small collection: latency against the unrestricted search, and
whether it still finds its top 5.

    python bench/collection_latency.py --admin-url URL --template pgkb_head \
        [--copy pgkb_coll_bench] [--share 0.01] [--queries 60] [--repeat 3] [--fresh]

Copies the database --template into --copy on the same server (CREATE DATABASE ... TEMPLATE; the
template is only read), upgrades the copy to this branch's head (the collections migration moves
every document into `default`), then moves about --share of the chunks (whole documents of at most
50 chunks, picked by md5 of their id) into a collection `small`. Queries: --queries chunks of
`small` (fixed seed), each the first 12 plain words of the chunk, embedded with the active model
(the local all-MiniLM-L6-v2). For each query, kb.hybrid_search runs unrestricted and restricted to
`small` (filters {"collections": ["small"]}); time is the server's "Execution Time" of EXPLAIN
(ANALYZE, TIMING OFF), median of --repeat runs. "Found" compares the restricted top 5 with the exact
restricted top 5 (the same call with index scans off, so the vector leg scans and sorts every row of
`small`): the share of the exact top 5 chunk ids the normal call returns, and how many calls
returned fewer than 5 rows. Last, the restricted calls again as a reader granted only `small` (which
also counts its term statistics in `small`, kb.term_df): a role created inside a transaction that is
rolled back (SET LOCAL SESSION AUTHORIZATION), so nothing stays on the server.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import urllib.parse
from typing import Any

import psycopg
from psycopg import sql

HYBRID = "SELECT chunk_id FROM kb.hybrid_search(%(q)s, %(v)s::vector, 5, filters => %(f)s::jsonb)"


def server_ms(conn: psycopg.Connection[Any], params: dict[str, Any]) -> float:
    row = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + HYBRID, params).fetchone()
    assert row is not None
    return float(row[0][0]["Execution Time"])


def prepare(admin_url: str, template: str, copy: str, share: float, fresh: bool) -> str:
    from loader.db.connect import connect
    from loader.db.migrations import upgrade

    with psycopg.connect(admin_url, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (copy,)).fetchone()
        if exists and fresh:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(copy)))
            exists = None
        if not exists:
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(copy), sql.Identifier(template)
                )
            )
    parts = urllib.parse.urlsplit(admin_url)
    url = urllib.parse.urlunsplit(parts._replace(path="/" + copy))
    upgrade(url)
    with connect(url) as conn:
        if conn.execute("SELECT 1 FROM kb.collections WHERE name = 'small'").fetchone() is None:
            conn.execute("INSERT INTO kb.collections (name) VALUES ('small')")
            conn.execute(
                """
                WITH d AS (
                    SELECT d.id, (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id) AS n
                      FROM kb.documents d
                ), running AS (  -- documents of at most 50 chunks: many of them, none dominating
                    SELECT d.id, sum(d.n) OVER (ORDER BY md5(d.id::text)) AS upto
                      FROM d WHERE d.n <= 50
                )
                UPDATE kb.documents t SET collection = 'small'
                  FROM running r
                 WHERE t.id = r.id
                   AND r.upto <= %s * (SELECT count(*) FROM kb.chunks)
                """,
                (share,),
            )
            conn.execute("ANALYZE kb.documents")
            conn.commit()
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--template", default="pgkb_head")
    parser.add_argument("--copy", default="pgkb_coll_bench")
    parser.add_argument("--share", type=float, default=0.01)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fresh", action="store_true", help="Drop and copy again.")
    args = parser.parse_args()

    from loader.db.connect import connect
    from loader.providers.embeddings import get_embedder
    from loader.settings import Settings

    url = prepare(args.admin_url, args.template, args.copy, args.share, args.fresh)
    with connect(url) as conn:
        conn.autocommit = True
        sizes = conn.execute(
            "SELECT d.collection, count(DISTINCT d.id), count(c.id) FROM kb.documents d "
            "JOIN kb.chunks c ON c.document_id = d.id GROUP BY 1 ORDER BY 1"
        ).fetchall()
        picked = conn.execute(
            "SELECT c.content FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
            "WHERE d.collection = 'small' AND length(c.content) > 80 ORDER BY c.id"
        ).fetchall()
        # plain words only: kb.search_query reads '-' as negation, and a run of dashes (a psql
        # table's rule line) makes to_tsquery fail with "tsquery stack too small"
        texts = [" ".join(re.findall(r"[A-Za-z][A-Za-z0-9_]*", r[0])[:12]) for r in picked]
        random.Random(42).shuffle(texts)
        texts = texts[: args.queries]
        embedder = get_embedder(Settings())
        vectors = [str(list(v)) for v in embedder.embed(texts)]
        timings: dict[str, list[float]] = {"all": [], "small": []}
        found: list[float] = []
        short = 0
        small = json.dumps({"collections": ["small"]})
        for text, vector in zip(texts, vectors, strict=True):
            for key, filters in (("all", "{}"), ("small", small)):
                params = {"q": text, "v": vector, "f": filters}
                server_ms(conn, params)  # warm
                timings[key].append(
                    statistics.median(server_ms(conn, params) for _ in range(args.repeat))
                )
            params = {"q": text, "v": vector, "f": small}
            got = [r[0] for r in conn.execute(HYBRID, params).fetchall()]
            with conn.transaction():
                conn.execute("SET LOCAL enable_indexscan = off")
                exact = [r[0] for r in conn.execute(HYBRID, params).fetchall()]
            short += len(got) < 5
            if exact:
                found.append(len(set(got) & set(exact)) / len(exact))

        # the same restricted calls as a reader granted only `small` (per-collection term
        # statistics): a role made inside one transaction that is rolled back, so nothing stays
        reader_ms: list[float] = []
        with conn.transaction(force_rollback=True):
            role = "pgkb_bench_reader_tmp"
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
            conn.execute(sql.SQL("GRANT kb_reader TO {}").format(sql.Identifier(role)))
            conn.execute("INSERT INTO kb.collection_grants VALUES (%s, 'small')", (role,))
            conn.execute(sql.SQL("SET LOCAL SESSION AUTHORIZATION {}").format(sql.Identifier(role)))
            for text, vector in zip(texts, vectors, strict=True):
                params = {"q": text, "v": vector, "f": "{}"}
                server_ms(conn, params)
                reader_ms.append(
                    statistics.median(server_ms(conn, params) for _ in range(args.repeat))
                )
        timings["reader"] = reader_ms

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    print(f"collections (name, documents, chunks): {sizes}")
    print(f"queries: {len(texts)} (chunks of 'small', first 12 plain words), repeat {args.repeat}")
    labels = {
        "all": "unrestricted (owner)",
        "small": "filters collections=small (owner)",
        "reader": "as a reader granted small only",
    }
    for key, label in labels.items():
        values = timings[key]
        print(
            f"hybrid_search {label:<36} "
            f"p50 {statistics.median(values):6.1f} ms  p95 {pct(values, 0.95):6.1f} ms"
        )
    print(
        f"restricted top 5 vs exact restricted top 5: mean overlap {statistics.mean(found):.3f}; "
        f"calls with fewer than 5 rows: {short}"
    )


if __name__ == "__main__":
    main()
