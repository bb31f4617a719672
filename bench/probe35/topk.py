# ruff: noqa
# A probe (deleted after use); see the commit that deletes it.
import sys, psycopg, statistics
sys.path.insert(0, "/work/main")
from bench import common
url = sys.argv[1]
with psycopg.connect(url, autocommit=True) as conn:
    idx = "kb." + conn.execute("SELECT kb.keyword_index_name('default')").fetchone()[0]
    conn.execute("SET search_path = pg_catalog, public")
    texts = common.questions(url, 60)
    for k in (20, 200, 2000, 10000):
        ts = [common.server_ms(conn, "SELECT c.id, bm25_get_current_score() FROM kb.chunks c WHERE c.collection = 'default' ORDER BY (c.heading_path || ' ' || c.content) <@> to_bm25query(%(q)s, %(i)s) LIMIT %(k)s", {"q": t, "i": idx, "k": k}) for t in texts]
        ts.sort(); print(k, "p50 %.2f p95 %.2f" % (ts[len(ts)//2], ts[int(len(ts)*.95)]), flush=True)
