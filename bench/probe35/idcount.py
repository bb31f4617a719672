# ruff: noqa
# A probe (deleted after use); see the commit that deletes it.
"""How many identifier / strict candidates each benchmark question brings (pg_textsearch path)."""
import sys, time, psycopg
sys.path.insert(0, "/work/main")
from bench import common
url = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
qs = common.questions(url, n)
IDQ = """
SELECT (SELECT string_agg('(' || x.alternatives || ')', ' & ')::tsquery
          FROM (SELECT string_agg(DISTINCT v.p::text, ' | ') AS alternatives
                  FROM unnest(q.identifiers) AS i
                 CROSS JOIN LATERAL (
                       SELECT phraseto_tsquery('english'::regconfig, i) AS p
                       UNION
                       SELECT phraseto_tsquery('english'::regconfig, w)
                         FROM regexp_split_to_table(left(%(t)s, 20000), '\\s+') AS w
                        WHERE w ~* ('\\m' || i || '\\M')) v
                 WHERE numnode(v.p) > 0 GROUP BY i) x) AS idq,
       q.identifiers, q.strict_first, q.strict_query
  FROM kb.search_query(%(t)s) q"""
rows = []
with psycopg.connect(url) as conn:
    for t in qs:
        idq, ids, sf, sq = conn.execute(IDQ, {"t": t}).fetchone()
        nid = nex = nst = 0
        if idq is not None:
            nid = conn.execute("SELECT count(*) FROM (SELECT 1 FROM kb.chunks c WHERE c.tsv @@ %s::tsquery LIMIT 1000) s", (idq,)).fetchone()[0]
            nex = conn.execute("""SELECT count(*) FROM (SELECT c.heading_path, c.content FROM kb.chunks c WHERE c.tsv @@ %s::tsquery LIMIT 1000) c
                  WHERE NOT EXISTS (SELECT 1 FROM unnest(%s::text[]) i WHERE NOT (c.heading_path || ' ' || c.content) ~* ('\\m' || i || '\\M'))""", (idq, ids)).fetchone()[0]
        if sf:
            nst = conn.execute("SELECT count(*) FROM (SELECT 1 FROM kb.chunks c WHERE c.tsv @@ %s::tsquery LIMIT 1000) s", (sq,)).fetchone()[0]
        rows.append((t, ids, nid, nex, sf, nst))
with_id = [r for r in rows if r[1]]
print(f"{len(rows)} questions; identifiers in {len(with_id)}; strict_first in {sum(1 for r in rows if r[4])}")
for r in sorted(rows, key=lambda r: -(r[2] + r[5]))[:40]:
    print(f"id {r[2]:5d} exact {r[3]:5d} strict {r[5]:5d}  {r[1]}  {r[0][:70]}")
