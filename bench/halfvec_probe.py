"""halfvec against vector for one model's HNSW index, on a corpus kept by bench/scale_bench.py:
build time and size of a second HNSW index built beside the existing one (halfvec by default;
with --m/--ef-construction, a vector index with those build parameters instead), then recall@20
against an exact full-precision scan and the server-side time of the bare index scan, for both
indexes at several ef_search (iterative scan relaxed_order, as kb.vector_search sets it). The
probe index is dropped at the end.

    python bench/halfvec_probe.py CORPUS_URL QUERIES_JSON OUT_JSON [N_QUERIES] [M EF_CONSTRUCTION]

QUERIES_JSON: the query vectors scale_bench.py cached beside its --json (<name>.queries.json).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scale_bench as sb
from pgvector import Vector


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    from loader.db.connect import connect

    url, queries, target = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    params = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else None
    probe_type = "halfvec" if params is None else "vector"
    with_params = (
        "" if params is None else f" WITH (m = {params[0]}, ef_construction = {params[1]})"
    )
    vs = [Vector(v) for v in json.loads(queries.read_text())["vectors"][:n]]
    out: dict[str, object] = {}
    with connect(url, autocommit=True) as conn:
        dims = conn.execute("SELECT dims FROM kb.embedding_models WHERE id = 1").fetchone()[0]  # type: ignore[index]
        conn.execute("SET hnsw.iterative_scan = 'relaxed_order'")
        conn.execute("SET enable_indexscan = off")
        exact = (
            f"SELECT chunk_id FROM kb.embeddings WHERE model_id = 1 "
            f"ORDER BY embedding::vector({dims}) <=> %(v)s, chunk_id LIMIT 20"
        )
        truth = [{r[0] for r in conn.execute(exact, {"v": v})} for v in vs]
        conn.execute("RESET enable_indexscan")
        conn.execute("SET maintenance_work_mem = '3GB'")
        started = time.perf_counter()
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS embeddings_hnsw_half_probe ON kb.embeddings "
            f"USING hnsw ((embedding::{probe_type}({dims})) {probe_type}_cosine_ops)"
            f"{with_params} WHERE model_id = 1"
        )
        out["halfvec_build_s"] = round(time.perf_counter() - started, 1)
        out["load_during_build"] = load()
        out["size_mb"] = {
            name: round(
                conn.execute(f"SELECT pg_relation_size('kb.{name}')").fetchone()[0] / 2**20,  # type: ignore[index]
                1,
            )
            for name in ("embeddings_hnsw_model_1", "embeddings_hnsw_half_probe")
        }
        conn.execute("ANALYZE kb.embeddings")
        print(out, flush=True)
        forms = {
            "vector": f"SELECT chunk_id FROM kb.embeddings WHERE model_id = 1 "
            f"ORDER BY embedding::vector({dims}) <=> %(v)s LIMIT 20",
            "probe": f"SELECT chunk_id FROM kb.embeddings WHERE model_id = 1 "
            f"ORDER BY embedding::{probe_type}({dims}) <=> %(v)s::{probe_type}({dims}) LIMIT 20",
        }
        if params is not None:  # the same expression: hide the model's index (rolled back)
            conn.execute("BEGIN")
            conn.execute("DROP INDEX kb.embeddings_hnsw_model_1")
            del forms["vector"]
        for ef in (40, 100, 200, 400, 800):
            conn.execute(f"SET hnsw.ef_search = {ef}")
            for name, sql in forms.items():
                plan = json.dumps(
                    conn.execute("EXPLAIN (FORMAT JSON) " + sql, {"v": vs[0]}).fetchone()[0]
                )  # type: ignore[index]
                assert ("embeddings_hnsw_half_probe" in plan) == (name == "probe"), plan
                for v in vs[:10]:
                    conn.execute(sql, {"v": v}).fetchall()
                hits, times = [], []
                for v, true in zip(vs, truth, strict=True):
                    got = {r[0] for r in conn.execute(sql, {"v": v})}
                    hits.append(len(got & true) / 20)
                    times.append(sb.server_ms(conn, sql, {"v": v}))
                key = f"{name} ef_search {ef}"
                out[key] = {
                    "recall_at_20": round(statistics.fmean(hits), 4),
                    **sb.summary(times),
                    "load": load(),
                }
                print(key, out[key], flush=True)
        if params is not None:
            conn.execute("ROLLBACK")
        conn.execute("DROP INDEX kb.embeddings_hnsw_half_probe")
    target.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
