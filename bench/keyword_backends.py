"""The keyword leg on each backend, interleaved: kb.keyword_search with the SQL BM25 and with
pg_textsearch's bm25 index per collection, over one knowledge base of synthetic text split into
1, 10, 100 ... collections (what many small collections cost).

    python bench/keyword_backends.py ADMIN_URL [--chunks 10000] [--collections 1,10,100]
                                     [--queries 200] [--json out.json]

ADMIN_URL: a server that loads pg_textsearch (shared_preload_libraries) and may create
databases. For each collection count a database is created, migrated, filled with --chunks
chunks of synthetic text (words drawn from a Zipf-like vocabulary of 20,000 words, 60 to 180
words a chunk, a heading of 2 to 5 words), the extension and the indexes built (timed), then
each query runs once per backend, alternating (sql, pg_textsearch, sql, ...), timed at the
client on a Unix socket, over every collection (the owner's scope). Prints p50 / p95 ms per
backend and the load average before and after each measurement. The databases are dropped.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from loader.db.migrations import upgrade

WORDS = 20000


def load(url: str, chunks: int, collections: int) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(WORD_SQL)
        conn.execute(
            "INSERT INTO kb.collections (name) SELECT 'c' || g FROM generate_series(1, %s) g",
            (collections,),
        )
        per_doc = 10
        docs = max(chunks // per_doc, 1)
        conn.execute(
            "INSERT INTO kb.documents (source_uri, title, content_sha, collection)"
            " SELECT 'doc' || g, 'Doc ' || g, md5(g::text), 'c' || (1 + g %% %s)"
            " FROM generate_series(1, %s) g",
            (collections, docs),
        )
        # word n with probability ~ 1/n: floor(exp(random() * ln(WORDS)))
        conn.execute(
            """
            INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha,
                                   token_count)
            SELECT d.id, i,
                   (SELECT string_agg(pg_temp.kb_word(floor(exp(random() * ln(%(w)s)))::int), ' ')
                      FROM generate_series(1, 2 + (d.n + i) %% 4)),
                   (SELECT string_agg(pg_temp.kb_word(floor(exp(random() * ln(%(w)s)))::int), ' ')
                      FROM generate_series(1, 60 + ((d.n * 7 + i * 13) %% 121))),
                   md5(d.id::text || i), 100
              FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM kb.documents) d
             CROSS JOIN generate_series(0, %(per)s - 1) i
            """,
            {"w": WORDS, "per": per_doc},
        )
        conn.execute("ANALYZE")
        conn.commit()


def word(n: int) -> str:
    """The n-th word of the vocabulary, in letters only ('w' + n in base 26), as kb_word(n)."""
    letters = ""
    while True:
        letters = chr(97 + n % 26) + letters
        n //= 26
        if n == 0:
            return "w" + letters


WORD_SQL = """
CREATE FUNCTION pg_temp.kb_word(n integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    WITH RECURSIVE d(k, s) AS (SELECT n / 26, chr(97 + n % 26)
                               UNION ALL SELECT k / 26, chr(97 + k % 26) || s FROM d WHERE k > 0)
    SELECT 'w' || s FROM d WHERE k = 0
$$
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(url: str, queries: list[str]) -> dict[str, Any]:
    times: dict[str, list[float]] = {"sql": [], "pg_textsearch": []}
    with psycopg.connect(url, autocommit=True) as conn:
        for backend in times:  # warm both
            conn.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
            for q in queries[:20]:
                conn.execute("SELECT count(*) FROM kb.keyword_search(%s, 20)", (q,)).fetchone()
        for q in queries:
            for backend in times:
                conn.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
                start = time.perf_counter()
                conn.execute("SELECT chunk_id FROM kb.keyword_search(%s, 20)", (q,)).fetchall()
                times[backend].append((time.perf_counter() - start) * 1000)
    return {
        b: {"p50": round(statistics.median(t), 2), "p95": round(percentile(t, 0.95), 2)}
        for b, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("admin_url")
    parser.add_argument("--chunks", type=int, default=10000)
    parser.add_argument("--collections", default="1,10,100")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--keep", action="store_true", help="keep the databases (printed)")
    args = parser.parse_args()
    rng = random.Random(34)
    queries = [
        " ".join(word(int(rng.paretovariate(0.35)) % WORDS) for _ in range(rng.randint(1, 5)))
        for _ in range(args.queries)
    ]
    results = []
    for n in (int(x) for x in args.collections.split(",")):
        name = f"pgkb_kwb_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(args.admin_url)
        url = urlunsplit(parts._replace(path=f"/{name}"))
        try:
            upgrade(url)
            load(url, args.chunks, n)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pg_textsearch")
                start = time.perf_counter()
                conn.execute("SELECT kb.build_keyword_indexes()")
                build_s = time.perf_counter() - start
            before = loadavg()
            figures = measure(url, queries)
            row = {
                "chunks": args.chunks,
                "collections": n,
                "index_build_s": round(build_s, 2),
                **figures,
                "load_before": before,
                "load_after": loadavg(),
            }
            print(json.dumps(row), flush=True)
            results.append(row)
        finally:
            if args.keep:
                print(f"kept {url}", flush=True)
            else:
                with psycopg.connect(args.admin_url, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
