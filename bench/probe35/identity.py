# ruff: noqa
# A probe (deleted after use); see the commit that deletes it.
"""top 20 (ids, scores to 9 digits) of kb35.keyword_search_pg_textsearch (the working tree's text)
against kb's, and server-side ms of each, interleaved."""
import sys, statistics, psycopg, pathlib
sys.path.insert(0, "/work/main")
from bench import common
url = sys.argv[1]; n = int(sys.argv[2])
text = pathlib.Path("/work/main/sql_functions/keyword_search_pg_textsearch.sql").read_text()
text = text.replace("kb.keyword_search_pg_textsearch(", "kb35.keyword_search_pg_textsearch(")
with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("CREATE SCHEMA IF NOT EXISTS kb35")
    conn.execute(text)
    texts = common.questions(url, n)
    words = [r[0] for r in conn.execute("SELECT lexeme FROM kb.term_stats ORDER BY df DESC LIMIT 50")]
    same = 0; diffs = []; ta = []; tb = []
    for q in texts + words:
        a, b = (conn.execute(f"SELECT chunk_id, round(score::numeric, 9) FROM {s}.keyword_search_pg_textsearch(%s, 20)", (q,)).fetchall() for s in ("kb", "kb35"))
        sa = [round(float(x[1]), 4) for x in a]; sb = [round(float(x[1]), 4) for x in b]
        ok = sa == sb and (set(x[0] for x in a) == set(x[0] for x in b) or sa[-1:] == sb[-1:])
        same += ok
        if not ok: diffs.append((q, a[:20], b[:20]))
        for s, t in (("kb", ta), ("kb35", tb)):
            t.append(common.server_ms(conn, f"SELECT * FROM {s}.keyword_search_pg_textsearch(%(q)s, 20)", {"q": q}))
    print(conn.info.dbname, "top 20 identical:", same, "of", len(texts) + len(words))
    for s, t in (("kb", ta), ("kb35", tb)):
        t2 = sorted(t); print(s, "p50 %.2f p95 %.2f p99 %.2f max %.2f mean %.2f" % (t2[len(t2)//2], t2[int(len(t2)*.95)], t2[int(len(t2)*.99)], t2[-1], statistics.fmean(t2)))
    slow = sorted(zip(ta, tb, texts + words), key=lambda x: -x[0])[:12]
    for a, b, q in slow: print("%.1f -> %.1f  %s" % (a, b, q[:70]))
    for d in diffs[:10]: print("DIFF", d[0][:60], d[1], d[2])
