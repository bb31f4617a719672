"""What many collections cost the keyword leg, and what one bm25 index over every chunk would
change: over one knowledge base of synthetic text split into 1, 10, 100 ... collections.

    python bench/keyword_collections_probe.py ADMIN_URL [--chunks 10000] [--collections 1,10,100]
                                              [--queries 200] [--json out.json]

ADMIN_URL: a server that loads pg_textsearch and may create databases. For each collection count
a database is created, migrated, filled with --chunks chunks of synthetic text (a Zipf-like
vocabulary of 20,000 words, 60 to 180 words a chunk, a heading of 2 to 5 words), the extension,
the per-collection indexes and one index over every chunk built (timed). Then, interleaved query
by query, server-side (EXPLAIN ANALYZE: planning + execution): kb.keyword_search over every
collection and narrowed to collection c1 on each backend, the one index (post-filtered to c1
for the narrowed call: rows returned counted), and c1's index scan alone. Then the leak: a c1
chunk's score for a word from its own index and from the one index, before and after 500
chunks holding the word are added to collection c2. A probe: deleted after use, kept in git.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
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


GLOBAL = "(heading_path || ' ' || content || ' ')"  # another expression than the partial ones'


def explain(conn, statement, params):
    plan = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, SUMMARY, FORMAT JSON) " + statement, params)
    row = plan.fetchone()[0][0]
    return row["Planning Time"], row["Execution Time"]


def measure(url, queries):
    """Server-side ms (planning + execution) of each variant, interleaved query by query:
    kb.keyword_search over every collection on each backend, the same narrowed to collection c1,
    one bm25 index over all chunks (post-filtered to c1 for the narrowed call), and one
    collection's index scan alone (planning and execution apart)."""
    with psycopg.connect(url, autocommit=True) as conn:
        ext = "public"
        conn.execute("SET enable_seqscan = off")
        idx = "kb." + conn.execute("SELECT kb.keyword_index_name('c1')").fetchone()[0]
        ks = "SELECT chunk_id FROM kb.keyword_search(%(q)s, 20, %(f)s::jsonb)"
        one = (
            f"SELECT c.id FROM kb.chunks c WHERE c.collection = 'c1' ORDER BY (c.heading_path || ' '"
            f" || c.content) OPERATOR({ext}.<@>) {ext}.to_bm25query(%(q)s, '{idx}') LIMIT 20"
        )
        glob = (
            f"SELECT c.id FROM kb.chunks c WHERE %(c)s::text IS NULL OR c.collection = %(c)s"
            f" ORDER BY {GLOBAL} OPERATOR({ext}.<@>) {ext}.to_bm25query(%(q)s, 'kb.probe_global')"
            " LIMIT 20"
        )
        every, c1 = "{}", json.dumps({"collections": ["c1"]})
        variants = {
            "sql, all": ("sql", ks, {"f": every}),
            "pg_textsearch, all": ("pg_textsearch", ks, {"f": every}),
            "one index, all": ("sql", glob, {"c": None}),
            "sql, c1": ("sql", ks, {"f": c1}),
            "pg_textsearch, c1": ("pg_textsearch", ks, {"f": c1}),
            "one index, c1 post-filtered": ("sql", glob, {"c": "c1"}),
            "c1's index scan alone": ("sql", one, {}),
        }
        times = {v: [] for v in variants}
        plan = {v: [] for v in variants}
        rows = {v: [] for v in variants}
        names = list(variants)
        for q in queries[:10]:  # warm: each index's first use in a session costs more
            for backend, statement, params in variants.values():
                conn.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
                conn.execute(statement, {"q": q, **params}).fetchall()
        for i, q in enumerate(queries):
            for v in names[i % len(names) :] + names[: i % len(names)]:
                backend, statement, params = variants[v]
                conn.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
                p, e = explain(conn, statement, {"q": q, **params})
                times[v].append(p + e)
                plan[v].append(p)
                if i < 50:
                    rows[v].append(len(conn.execute(statement, {"q": q, **params}).fetchall()))
    return {
        v: {
            "p50": round(statistics.median(t), 2),
            "p95": round(percentile(t, 0.95), 2),
            "planning_p50": round(statistics.median(plan[v]), 2),
            "rows_mean": round(statistics.fmean(rows[v]), 1),
        }
        for v, t in times.items()
    }


def leak(url, word_text):
    """The BM25 score of one c1 chunk for a word, from c1's own index and from one index over
    every chunk, before and after 500 chunks holding the word are added to collection c2."""
    ext = "public"
    with psycopg.connect(url, autocommit=True) as conn:
        idx = "kb." + conn.execute("SELECT kb.keyword_index_name('c1')").fetchone()[0]
        cid = conn.execute(
            "SELECT id FROM kb.chunks WHERE collection = 'c1' AND content ~ ('\\m' || %s || '\\M')"
            " ORDER BY id LIMIT 1",
            (word_text,),
        ).fetchone()[0]
        score = (
            f"SELECT (heading_path || ' ' || content) OPERATOR({ext}.<@>) {ext}.to_bm25query(%(w)s, '{idx}'),"
            f" {GLOBAL} OPERATOR({ext}.<@>) {ext}.to_bm25query(%(w)s, 'kb.probe_global')"
            " FROM kb.chunks WHERE id = %(id)s"
        )
        before = conn.execute(score, {"w": word_text, "id": cid}).fetchone()
        doc = conn.execute(
            "INSERT INTO kb.documents (source_uri, title, content_sha, collection)"
            " VALUES ('leak', 'leak', 'leak', 'c2') RETURNING id"
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha,"
            " token_count) SELECT %s, g, 'x', repeat(%s || ' ', 5) || 'filler words here', md5(g::text), 9"
            " FROM generate_series(1, 500) g",
            (doc, word_text),
        )
        after = conn.execute(score, {"w": word_text, "id": cid}).fetchone()
        conn.execute("DELETE FROM kb.documents WHERE id = %s", (doc,))
    return {
        "word": word_text,
        "own_index": [round(before[0], 4), round(after[0], 4)],
        "one_index": [round(before[1], 4), round(after[1], 4)],
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
                start = time.perf_counter()
                conn.execute(
                    f"CREATE INDEX probe_global ON kb.chunks USING bm25 ({GLOBAL})"
                    " WITH (text_config = 'english', k1 = 0.9, b = 0.75)"
                )
                global_s = time.perf_counter() - start
            before = loadavg()
            figures = measure(url, queries)
            row = {
                "chunks": args.chunks,
                "collections": n,
                "index_build_s": round(build_s, 2),
                "one_index_build_s": round(global_s, 2),
                "variants": figures,
                "leak": leak(url, word(3)) if n > 1 else None,
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
