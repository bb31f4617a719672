"""A probe (deleted after use): pg_textsearch's own top-20 index scan against kb.keyword_search on
the pg_textsearch backend, per question (server ms, buffers), and the slowest questions.

    python bench/pts_floor_probe.py "postgresql://...host=<server>" DB [DB ...]
"""

import sys

import psycopg

from bench import common


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main(server: str, databases: list[str]) -> None:
    for db in databases:
        url = common.with_dbname(server, db)
        qs = common.questions(url, 300)
        with psycopg.connect(url, autocommit=True) as c:
            idx = c.execute("select kb.keyword_index_name('default')").fetchone()[0]
            c.execute("set enable_seqscan=off")
            c.execute("set search_path=public,kb,pg_catalog")
            c.execute("set pgkb.keyword_backend='pg_textsearch'")
            raw = (
                "SELECT c.id, bm25_get_current_score() FROM kb.chunks c WHERE c.collection='default'"
                " ORDER BY (c.heading_path || ' ' || c.content) <@> to_bm25query(%(q)s, 'kb."
                + idx
                + "') LIMIT 20"
            )
            fn = "SELECT * FROM kb.keyword_search(%(q)s, 20)"
            res: dict[str, list[float]] = {"raw": [], "fn": [], "rawbuf": []}
            slow = []
            for q in qs[:20]:
                c.execute(raw, {"q": q}).fetchall()
                c.execute(fn, {"q": q}).fetchall()
            for q in qs:
                for name, s in (("raw", raw), ("fn", fn)):
                    j = c.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + s, {"q": q}).fetchone()[0][0]
                    res[name].append(j["Execution Time"])
                    if name == "raw":
                        res["rawbuf"].append(j["Plan"]["Shared Hit Blocks"])
                ident = c.execute("select identifiers, strict_first from kb.search_query(%s)", (q,)).fetchone()
                slow.append((res["fn"][-1], ident[0] is not None, ident[1]))
            print(db, {k: (round(pct(v, 50), 2), round(pct(v, 95), 2)) for k, v in res.items()})
            over = [s for s in slow if s[0] > 20]
            print("  fn over 20 ms:", len(over), "with identifiers:", sum(s[1] for s in over),
                  "strict:", sum(s[2] for s in over), "of", len(slow), "questions;",
                  sum(s[1] for s in slow), "with identifiers")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
