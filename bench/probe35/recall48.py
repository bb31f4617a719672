# ruff: noqa
# A probe (deleted after use); see the commit that deletes it.
"""recall@20 of kb.vector_search on the probe index (m 48, ef_construction 200) with the model's
index hidden by a rolled-back DROP, against an exact scan; server-side ms. Then the same on the
model's index (m 32, ef_construction 128) for the same ef_search values."""
import sys, statistics, json, psycopg
sys.path.insert(0, "/work/main")
from bench import common
from pgvector.psycopg import register_vector
url = sys.argv[1]; efs = [int(x) for x in sys.argv[2].split(",")]; n = int(sys.argv[3])
config = common.model_settings(url)
texts = common.questions(url, n)
vectors = common.embed(texts, config)
exact = ("SELECT e.chunk_id FROM kb.embeddings e ORDER BY e.embedding::vector(384) <=> %(v)s, e.chunk_id LIMIT 20")
search = "SELECT chunk_id FROM kb.vector_search(%(v)s, 20, '{}'::jsonb, ef_search => %(ef)s)"
with psycopg.connect(url) as conn:
    register_vector(conn)
    conn.execute("SET enable_indexscan = off")
    truth = [{r[0] for r in conn.execute(exact, {"v": v})} for v in vectors]
    conn.execute("RESET enable_indexscan")
    conn.commit()
    for label in ("m32", "m48"):
        if label == "m48":
            conn.execute("DROP INDEX kb.embeddings_hnsw_model_1")
        for ef in efs:
            hits, times = [], []
            for v, t in zip(vectors, truth):
                got = {r[0] for r in conn.execute(search, {"v": v, "ef": ef})}
                hits.append(len(got & t) / 20)
                times.append(common.server_ms(conn, search, {"v": v, "ef": ef}))
            times.sort()
            print(label, ef, "recall %.4f p50 %.2f p95 %.2f" % (statistics.fmean(hits), times[len(times)//2], times[int(len(times)*.95)]), flush=True)
    conn.rollback()
