# ruff: noqa
# A probe (deleted after use); see the commit that deletes it.
"""server-side ms of kb.keyword_search under pg_textsearch for each benchmark question; the slowest with their kinds."""
import sys, psycopg
sys.path.insert(0, "/work/main")
from bench import common
url = sys.argv[1]; n = int(sys.argv[2])
with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("SET pgkb.keyword_backend = 'pg_textsearch'")
    texts = common.questions(url, n)
    out = []
    for t in texts:
        ms = common.server_ms(conn, "SELECT * FROM kb.keyword_search(%(q)s, 20)", {"q": t})
        q = conn.execute("SELECT strict_first, identifiers, required IS NOT NULL, excluded IS NOT NULL, cardinality(lexemes) FROM kb.search_query(%s)", (t,)).fetchone()
        out.append((ms, q, t))
    out.sort(key=lambda x: -x[0])
    import statistics
    ts = sorted(x[0] for x in out); print("p50 %.2f p95 %.2f" % (ts[len(ts)//2], ts[int(len(ts)*.95)]))
    for kind in ("plain", "strict", "ident", "quoted"):
        sel = [x[0] for x in out if (kind == "plain" and not x[1][0] and not x[1][1] and not x[1][2]) or (kind == "strict" and x[1][0]) or (kind == "ident" and x[1][1]) or (kind == "quoted" and x[1][2])]
        if sel: sel.sort(); print(kind, len(sel), "p50 %.2f p95 %.2f" % (sel[len(sel)//2], sel[int(len(sel)*.95)]))
    for ms, q, t in out[:25]:
        print("%.1f sf=%s ids=%s req=%s exc=%s lex=%s  %s" % (ms, q[0], q[1], q[2], q[3], q[4], t[:70]))
