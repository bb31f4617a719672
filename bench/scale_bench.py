"""How pgkb's cost grows with the corpus: synthetic-but-real corpora of N chunks built with COPY,
then latency of each retrieval leg, HNSW recall, ingestion throughput and storage per chunk.

    python bench/scale_bench.py --source URL --sizes 10000,100000 [--scifact DIR] \
        [--queries 500] [--json scale.json] [--keep] [--vectors spread|noise|smote]
    python bench/scale_bench.py ... --json scale.json --reuse --revector  # new vectors only
    python bench/scale_bench.py ... --json scale.json --reuse --prewarm --measure one_client

--source is a pgkb database with real chunks and real embeddings of the active model (the whole
manual ingested with all-MiniLM-L6-v2); it is only read. The corpora are built on the same
server, in databases `pgkb_scale_<N>` (`pgkb_scale_<N><--db-suffix>`; replaced on each run;
dropped unless --keep):

- text: the source's chunks (heading path and content), then the SciFact abstracts of --scifact
  (BEIR corpus.jsonl: title as heading, abstract as content) when given, repeated until N chunks;
  every repetition after the first has about 15% of its words replaced by words of another chunk
  (same vocabulary and word frequencies, different texts);
- vectors (--vectors; see synthetic_vectors): the source's real vectors for its own chunks at
  first use; every other chunk's vector derives from the real vector of its text's source chunk
  (for SciFact text: of a source chunk chosen by index), normalised, so the neighbourhoods are
  those of real sentence vectors, not of uniform noise. ``spread`` (the default since round
  three): a random point of the simplex of the source vector and 3 of its 20 real nearest
  neighbours, plus Gaussian noise (sigma 0.01 per dimension), so the chunks derived from one
  source spread into the region between real vectors, as new texts on the same topics would;
  ``noise`` (round two): the source vector plus Gaussian noise (sigma 0.03 per dimension, cosine
  about 0.86 to the original), which at 1M makes ~39 near-copies of each source, a tight cluster
  HNSW cannot cross (bench/vector_structure.py measures both against the real vectors);
  ``smote``: towards one neighbour only;
- documents of 20 chunks; category 'c00' holds 1% of them (the selective filter), c01..c09 the
  rest.

Loading: kb.documents, kb.chunks (the statistics trigger fills kb.term_stats and
kb.term_postings in the same statement) and kb.embeddings each by one COPY, the HNSW index
dropped before and built after (kb.build_model_index), then ANALYZE. With --reuse --revector,
a kept corpus keeps its chunks and gets only new vectors (the same ones a fresh build with
--vectors would give): kb.embeddings emptied and loaded again by one COPY, the HNSW index
rebuilt, VACUUM ANALYZE.

Measured per size (database side: the server's own Execution Time of EXPLAIN (ANALYZE, TIMING
OFF) for one client; wall time per call over N connections for the concurrent runs):
- p50/p95/p99 of kb.keyword_search, kb.vector_search and kb.hybrid_search (defaults) over the
  distinct real queries (the bundled and manual evaluation questions, then SciFact claims), warm;
  the same with 8 concurrent clients (queries per second);
- the keyword leg on common words ('chapter', 'table', 'function', 'data') and long queries,
  bounded (default) and exact (max_postings => NULL: every posting read);
- HNSW recall@20 against an exact scan at several ef_search, with and without the 1% category
  filter;
- COPY throughput (chunks/s, embedding excluded), HNSW build time, storage per chunk.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = uuid.UUID("0b7c6f2e-5a41-4c1e-9f0a-23b5c0d1e7aa")
CHUNKS_PER_DOCUMENT = 20
SIGMA = 0.03  # the noise generator (round two)
SPREAD_NEIGHBOURS = 20  # the spread generator (from round three)
SPREAD_SIGMA = 0.01
SPREAD_MIX = 3
VECTORS = ["spread", "noise", "smote"]  # the first is the default
COMMON = ["chapter", "table", "function", "data"]
EF_SEARCH = [40, 100, 200, 400]

LEGS = {
    "keyword": "SELECT * FROM kb.keyword_search(%(q)s, 20)",
    "vector": "SELECT * FROM kb.vector_search(%(v)s, 20)",
    "hybrid": "SELECT * FROM kb.hybrid_search(%(q)s, %(v)s)",
}
PARTS = ["one_client", "extremes", "agreement", "recall", "plans", "concurrent"]
EXACT_KEYWORD = "SELECT * FROM kb.keyword_search(%(q)s, 20, max_postings => NULL)"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 0.50), 2),
        "p95": round(percentile(values, 0.95), 2),
        "p99": round(percentile(values, 0.99), 2),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def server_ms(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> float:
    row = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    return float(row[0][0]["Execution Time"])


# --- the material: real chunks, real vectors, real queries --------------------------------------


def read_source(url: str) -> tuple[list[tuple[str, str]], np.ndarray, str, int]:
    """(heading_path, content) of every chunk with a vector of the active model, the vectors,
    the model name and its dimensions."""
    from loader.db.connect import connect

    with connect(url) as conn:
        model = conn.execute("SELECT id, name, dims FROM kb.active_model()").fetchone()
        assert model is not None, "the source database has no active model"
        rows = conn.execute(
            "SELECT c.heading_path, c.content, e.embedding FROM kb.chunks c "
            "JOIN kb.embeddings e ON e.chunk_id = c.id AND e.model_id = %s ORDER BY c.id",
            (model[0],),
        ).fetchall()
    texts = [(r[0] or "", r[1]) for r in rows]
    vectors = np.array([r[2].to_numpy() for r in rows], dtype=np.float32)
    return texts, vectors, str(model[1]), int(model[2])


def read_scifact(folder: Path | None) -> tuple[list[tuple[str, str]], list[str]]:
    """SciFact abstracts (title, text) and claims, or nothing without --scifact."""
    if folder is None:
        return [], []
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
    queries = [json.loads(line)["text"] for line in (folder / "queries.jsonl").open()]
    return [(d.get("title") or "", d["text"]) for d in docs], queries


def real_queries(n: int, claims: list[str]) -> list[str]:
    """n distinct real questions: the bundled and manual evaluation questions, then claims."""
    texts: list[str] = []
    for name in (
        "questions.json",
        "questions-holdout.json",
        "manual/questions-tune.json",
        "manual/questions-heldout.json",
    ):
        path = ROOT / "eval" / name
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            items = data["questions"] if isinstance(data, dict) else data
            texts += [q["question"] for q in items if isinstance(q, dict) and q.get("question")]
    texts += claims
    seen: set[str] = set()
    distinct = [t for t in texts if not (t in seen or seen.add(t))]
    return distinct[:n]


def vary(text: str, donor: str, rnd: random.Random) -> str:
    """The text with about 15% of its words replaced by words of the donor text."""
    words = text.split()
    pool = donor.split() or words
    for i in range(len(words)):
        if rnd.random() < 0.15:
            words[i] = rnd.choice(pool)
    return " ".join(words)


# --- the vectors of a corpus ---------------------------------------------------------------------


def vector_sources(size: int, n_texts: int, n_real: int) -> np.ndarray:
    """The source vector of each chunk: the chunk's text is text ``i % n_texts``; a text of the
    source database has its own real vector, a SciFact text (index >= n_real) the real vector of
    source chunk ``t % n_real``."""
    t = np.arange(size) % n_texts
    return np.where(t < n_real, t, t % n_real)


def real_neighbours(vectors: np.ndarray, k: int = SPREAD_NEIGHBOURS) -> np.ndarray:
    """The k nearest other real vectors of each real vector (cosine; rows are unit vectors)."""
    out = np.empty((len(vectors), k), dtype=np.int64)
    for start in range(0, len(vectors), 2048):
        sims = vectors[start : start + 2048] @ vectors.T
        for r in range(len(sims)):
            sims[r, start + r] = -np.inf  # not itself
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
        out[start : start + 2048] = np.take_along_axis(top, order, axis=1)
    return out


def synthetic_vectors(
    size: int,
    n_texts: int,
    vectors: np.ndarray,
    kind: str = "spread",
    neighbours: np.ndarray | None = None,
) -> np.ndarray:
    """The vector of every chunk of a corpus of ``size`` chunks, deterministic for a size.

    The first ``len(vectors)`` chunks are the source chunks themselves: their real vectors. Every
    other chunk's vector derives from its source vector s (``vector_sources``); its "siblings"
    are the other chunks of the same source:

    - ``noise`` (round two): s plus Gaussian noise, sigma 0.03 per dimension, normalised. At 1M
      every source has ~39 siblings in a tight full-dimensional ball around s: each point's 20
      nearest neighbours are almost all its siblings and HNSW's graph splits into islands;
    - ``smote``: s moved towards one of its SPREAD_NEIGHBOURS real nearest neighbours n by
      u ~ U(0, 1) (SMOTE-like interpolation), plus Gaussian noise of SPREAD_SIGMA per
      dimension, normalised: siblings spread along different segments;
    - ``spread`` (from round three): a random point of the simplex of s and SPREAD_MIX of its
      SPREAD_NEIGHBOURS real nearest neighbours (weights ~ Dirichlet(1, ..., 1)), plus Gaussian
      noise of SPREAD_SIGMA per dimension, normalised: siblings fill the region between real
      vectors, as new texts on the same topics would, and meet the neighbouring sources'
      siblings there. Of the three it keeps the neighbourhood structure of the real vectors
      best (bench/vector_structure.py measures it).
    """
    n_real, dims = vectors.shape
    base = vector_sources(size, n_texts, n_real)
    out = np.empty((size, dims), dtype=np.float32)
    first = min(size, n_real)
    out[:first] = vectors[:first]
    rng = np.random.default_rng(size)
    if kind == "noise":  # row by row, exactly as round two drew it
        for i in range(first, size):
            noisy = vectors[base[i]] + rng.normal(0, SIGMA, dims).astype(np.float32)
            out[i] = noisy / np.linalg.norm(noisy)
        return out
    if kind not in VECTORS:
        raise ValueError(f"unknown vector generator {kind!r}: use one of {', '.join(VECTORS)}")
    mix = 1 if kind == "smote" else SPREAD_MIX
    if neighbours is None:
        neighbours = real_neighbours(vectors)
    for start in range(first, size, 20_000):
        b = base[start : start + 20_000]
        picked = np.argsort(rng.random((len(b), neighbours.shape[1])), axis=1)[:, :mix]
        n = neighbours[b[:, None], picked]  # (rows, mix): distinct neighbours of each source
        w = rng.dirichlet(np.ones(mix + 1), len(b)).astype(np.float32)
        v = w[:, :1] * vectors[b] + np.einsum("rm,rmd->rd", w[:, 1:], vectors[n])
        v += rng.normal(0, SPREAD_SIGMA, v.shape).astype(np.float32)
        out[start : start + len(b)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


# --- building a corpus ----------------------------------------------------------------------------


def build(
    admin_url: str,
    size: int,
    texts: list[tuple[str, str]],
    vectors: np.ndarray,
    model: str,
    dims: int,
    streams: int = 1,
    maintenance_work_mem: str = "512MB",
    kind: str = "spread",
    name: str | None = None,
) -> tuple[str, dict[str, Any]]:
    from loader.db.connect import connect
    from loader.db.migrations import upgrade
    from tests.helpers import create_database, drop_database

    name = name or f"pgkb_scale_{size}"
    drop_database(admin_url, name)
    url = create_database(admin_url, name)
    upgrade(url)
    rnd = random.Random(size)
    n_docs = (size + CHUNKS_PER_DOCUMENT - 1) // CHUNKS_PER_DOCUMENT
    doc_ids = [uuid.uuid5(NAMESPACE, f"{size}/{d}") for d in range(n_docs)]
    figures: dict[str, Any] = {"chunks": size, "documents": n_docs, "vectors": kind}
    with connect(url) as conn:
        model_id = conn.execute(
            "SELECT kb.register_model(%s, %s, 'local')", (model, dims)
        ).fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT kb.drop_model_index(%s)", (model_id,))
        conn.commit()

        started = time.perf_counter()
        with conn.cursor().copy(
            "COPY kb.documents (id, source_uri, title, content_sha, category) FROM STDIN"
        ) as copy:
            for d, did in enumerate(doc_ids):
                category = "c00" if d % 100 == 0 else f"c0{1 + d % 9}"
                copy.write_row((did, f"scale://{size}/{d}", f"document {d}", str(d), category))
        conn.commit()
        figures["copy_documents_s"] = round(time.perf_counter() - started, 2)

        # the rows and vectors first (client work, not timed), then the load
        chunk_vectors = synthetic_vectors(size, len(texts), vectors, kind)
        rows = []
        for i in range(size):
            t = i % len(texts)
            heading, content = texts[t]
            if i >= len(texts):
                content = vary(content, texts[rnd.randrange(len(texts))][1], rnd)
            rows.append(
                (
                    doc_ids[i // CHUNKS_PER_DOCUMENT],
                    i % CHUNKS_PER_DOCUMENT,
                    heading,
                    content,
                    str(i),
                    len(content.split()),
                )
            )
        figures.update(load_chunks(url, rows, streams, maintenance_work_mem))
        del rows

        figures.update(load_vectors(conn, size, model_id, chunk_vectors, maintenance_work_mem))
        conn.autocommit = True
        started = time.perf_counter()
        conn.execute(
            "VACUUM ANALYZE kb.documents, kb.chunks, kb.embeddings, kb.term_stats, kb.term_postings"
        )
        figures["vacuum_analyze_s"] = round(time.perf_counter() - started, 2)
        figures["storage"] = storage(conn, size)
    return url, figures


def load_vectors(
    conn: psycopg.Connection[Any],
    size: int,
    model_id: int,
    chunk_vectors: np.ndarray,
    maintenance_work_mem: str,
) -> dict[str, Any]:
    """COPY the vectors (row i of chunk_vectors for the chunk at position i: document i // 20,
    chunk_index i % 20) into kb.embeddings, which holds none of the model, with the model's HNSW
    index dropped, then build the index. Committed; timings."""
    n_docs = (size + CHUNKS_PER_DOCUMENT - 1) // CHUNKS_PER_DOCUMENT
    position = {
        uuid.uuid5(NAMESPACE, f"{size}/{d}"): d * CHUNKS_PER_DOCUMENT for d in range(n_docs)
    }
    ids = sorted(
        (position[r[1]] + r[2], r[0])
        for r in conn.execute("SELECT id, document_id, chunk_index FROM kb.chunks")
    )
    assert [i for i, _ in ids] == list(range(size)), "one chunk per row, each once"
    started = time.perf_counter()
    with conn.cursor().copy(
        "COPY kb.embeddings (chunk_id, model_id, embedding) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["bigint", "integer", "vector"])
        for (_, cid), vec in zip(ids, chunk_vectors, strict=True):
            copy.write_row((cid, model_id, vec))
    conn.commit()
    elapsed = time.perf_counter() - started
    figures: dict[str, Any] = {
        "copy_embeddings_s": round(elapsed, 2),
        "copy_embeddings_per_s": round(size / elapsed),
    }
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
    started = time.perf_counter()
    index = conn.execute("SELECT kb.build_model_index(%s)", (model_id,)).fetchone()[0]  # type: ignore[index]
    conn.commit()
    figures["hnsw_build_s"] = round(time.perf_counter() - started, 2)
    figures["hnsw_mb"] = round(
        conn.execute("SELECT pg_relation_size(%s::regclass)", (f"kb.{index}",)).fetchone()[0]  # type: ignore[index]
        / 2**20,
        1,
    )
    figures["load_average_index"] = Path("/proc/loadavg").read_text().split()[:3]
    conn.commit()
    return figures


def revector(
    url: str,
    size: int,
    n_texts: int,
    vectors: np.ndarray,
    kind: str,
    maintenance_work_mem: str,
) -> dict[str, Any]:
    """Replace the vectors of a corpus built by ``build`` (same size and texts) with those the
    generator ``kind`` gives a fresh build: the model's HNSW index dropped, kb.embeddings emptied
    and loaded again by one COPY, the index rebuilt, VACUUM ANALYZE. The chunks are untouched."""
    from loader.db.connect import connect

    chunk_vectors = synthetic_vectors(size, n_texts, vectors, kind)
    with connect(url) as conn:
        model_id = conn.execute("SELECT id FROM kb.active_model()").fetchone()[0]  # type: ignore[index]
        chunks = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0]  # type: ignore[index]
        if chunks != size:
            raise SystemExit(f"{url} holds {chunks} chunks, not {size}: not a corpus of this size")
        models = conn.execute("SELECT count(*) FROM kb.embedding_models").fetchone()[0]  # type: ignore[index]
        if models != 1:  # TRUNCATE below empties every model's vectors
            raise SystemExit(
                f"{url} has {models} embedding models; --revector replaces the vectors of a "
                "corpus built by this script, which has one"
            )
        conn.execute("SELECT kb.drop_model_index(%s)", (model_id,))
        conn.execute("TRUNCATE kb.embeddings")
        conn.commit()
        figures = {
            "vectors": kind,
            **load_vectors(conn, size, model_id, chunk_vectors, maintenance_work_mem),
        }
        conn.autocommit = True
        started = time.perf_counter()
        conn.execute("VACUUM ANALYZE kb.embeddings")
        figures["vacuum_analyze_s"] = round(time.perf_counter() - started, 2)
        figures["storage"] = storage(conn, size)
    return figures


CHUNK_COPY = (
    "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, token_count) "
    "FROM STDIN"
)


def load_chunks(
    url: str, rows: list[tuple[Any, ...]], streams: int, maintenance_work_mem: str
) -> dict[str, Any]:
    """COPY the chunks: one statement (the statistics trigger sees a corpus loaded at once and
    recomputes kb.term_stats, kb.corpus_stats and kb.term_postings set-wise), or ``streams``
    connections at once, each with the trigger deferred (pgkb.defer_keyword_stats), then one
    kb.rebuild_keyword_stats(). Wall times; chunks/s over the whole (COPY and statistics); with
    a server on this machine also its backends' CPU seconds (parallel workers not counted): the
    figure a busy machine does not change."""
    from keyword_stats_cost import backend_cpu  # bench/ is the script's directory

    from loader.db.connect import connect

    cpu: dict[str, float] = {"copy": 0.0, "rebuild": 0.0}

    def cpu_of(conn: psycopg.Connection[Any]) -> float:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        try:
            return backend_cpu(row[0]) if row else 0.0
        except OSError:  # a server on another machine: no CPU figures
            return float("nan")

    started = time.perf_counter()
    if streams == 1:
        with connect(url) as conn:
            # the postings index build
            conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
            )
            before = cpu_of(conn)
            with conn.cursor().copy(CHUNK_COPY) as copy:
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            cpu["copy"] = cpu_of(conn) - before  # the trigger's rebuild included
        copied = elapsed = time.perf_counter() - started
    else:
        errors: list[BaseException] = []

        def stream(part: list[tuple[Any, ...]]) -> None:
            try:
                with connect(url) as conn:
                    before = cpu_of(conn)
                    conn.execute("SET LOCAL pgkb.defer_keyword_stats = 'on'")
                    with conn.cursor().copy(CHUNK_COPY) as copy:
                        for row in part:
                            copy.write_row(row)
                    conn.commit()
                    cpu["copy"] += cpu_of(conn) - before
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        step = -(-len(rows) // streams)
        threads = [
            threading.Thread(target=stream, args=(rows[k : k + step],))
            for k in range(0, len(rows), step)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        copied = time.perf_counter() - started
        with connect(url) as conn:
            conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
            )
            before = cpu_of(conn)
            conn.execute("SELECT kb.rebuild_keyword_stats()")
            conn.commit()
            cpu["rebuild"] = cpu_of(conn) - before
        elapsed = time.perf_counter() - started
    return {
        "copy_streams": streams,
        "copy_only_s": round(copied, 2),
        "copy_chunks_s": round(elapsed, 2),
        "copy_chunks_per_s": round(len(rows) / elapsed),
        "copy_backend_cpu_s": round(cpu["copy"], 2),
        "rebuild_backend_cpu_s": round(cpu["rebuild"], 2),
        "load_average": Path("/proc/loadavg").read_text().split()[0],
    }


def storage(conn: psycopg.Connection[Any], size: int) -> dict[str, Any]:
    """Bytes per chunk of each table's heap, TOAST and indexes."""
    rows = conn.execute(
        """
        SELECT c.relname, pg_relation_size(c.oid), coalesce(pg_total_relation_size(
                   nullif(c.reltoastrelid, 0)), 0),
               (SELECT coalesce(json_object_agg(i.relname, pg_relation_size(i.oid)), '{}')
                  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                 WHERE x.indrelid = c.oid)
          FROM pg_class c
         WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'
           AND c.relname IN ('documents', 'chunks', 'embeddings', 'term_stats', 'term_postings')
        """
    ).fetchall()
    out: dict[str, Any] = {}
    total = 0
    for name, heap, toast, indexes in rows:
        out[name] = {
            "heap_b_per_chunk": round(heap / size),
            "toast_b_per_chunk": round(toast / size),
            "indexes_b_per_chunk": {k: round(v / size) for k, v in indexes.items()},
        }
        total += heap + toast + sum(indexes.values())
    out["total_b_per_chunk"] = round(total / size)
    out["database_mb"] = round(
        conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20  # type: ignore[index]
    )
    return out


# --- measuring ------------------------------------------------------------------------------------


def one_client(conn: psycopg.Connection[Any], queries: list[str], qvecs: list[Any]) -> dict:
    out = {}
    for leg, sql in LEGS.items():
        for q, v in zip(queries[:20], qvecs[:20], strict=True):  # warm
            conn.execute(sql, {"q": q, "v": v}).fetchall()
        times = [
            server_ms(conn, sql, {"q": q, "v": v}) for q, v in zip(queries, qvecs, strict=True)
        ]
        out[leg] = summary(times)
        print(f"    1 client  {leg:8} {out[leg]}", flush=True)
    return out


def concurrent(url: str, clients: int, queries: list[str], qvecs: list[Any]) -> dict:
    from loader.db.connect import connect

    out = {}
    for leg, sql in LEGS.items():
        times: list[float] = []
        conns = [connect(url, autocommit=True) for _ in range(clients)]

        def work(
            k: int, conn: psycopg.Connection[Any], sql: str = sql, times: list[float] = times
        ) -> None:
            mine = []
            for j in range(k, len(queries), clients):
                t0 = time.perf_counter()
                conn.execute(sql, {"q": queries[j], "v": qvecs[j]}).fetchall()
                mine.append((time.perf_counter() - t0) * 1000)
            times.extend(mine)  # list.extend is atomic under the GIL

        threads = [threading.Thread(target=work, args=(k, c)) for k, c in enumerate(conns)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        for c in conns:
            c.close()
        out[leg] = {**summary(times), "qps": round(len(times) / wall, 1)}
        print(f"    {clients} clients {leg:8} {out[leg]}", flush=True)
    return out


def keyword_extremes(conn: psycopg.Connection[Any], long_queries: list[str]) -> dict:
    out: dict[str, Any] = {}
    for word in COMMON:
        conn.execute(LEGS["keyword"], {"q": word}).fetchall()
        conn.execute(EXACT_KEYWORD, {"q": word}).fetchall()
        df = conn.execute("SELECT df FROM kb.query_terms(%s)", (word,)).fetchone()
        out[word] = {
            "df": df[0] if df else 0,
            "bounded_ms": round(
                min(server_ms(conn, LEGS["keyword"], {"q": word}) for _ in range(3)), 2
            ),
            "exact_ms": round(
                min(server_ms(conn, EXACT_KEYWORD, {"q": word}) for _ in range(3)), 2
            ),
        }
        print(f"    keyword {word!r}: {out[word]}", flush=True)
    bounded = [server_ms(conn, LEGS["keyword"], {"q": q}) for q in long_queries]
    exact = [server_ms(conn, EXACT_KEYWORD, {"q": q}) for q in long_queries]
    out["long"] = {
        "words": round(statistics.fmean(len(q.split()) for q in long_queries), 1),
        "bounded": summary(bounded),
        "exact": summary(exact),
    }
    print(f"    keyword long queries: {out['long']}", flush=True)
    return out


def keyword_agreement(conn: psycopg.Connection[Any], queries: list[str]) -> dict:
    """The bounded keyword leg against the exact sum (max_postings => NULL) on every query:
    share of the exact top 20 it returns, and queries whose top 10 differ at all."""
    overlap, differ = [], 0
    for q in queries:
        bounded = [r[0] for r in conn.execute(LEGS["keyword"], {"q": q})]
        exact = [r[0] for r in conn.execute(EXACT_KEYWORD, {"q": q})]
        if exact:
            overlap.append(len(set(bounded) & set(exact)) / len(exact))
        differ += bounded[:10] != exact[:10]
    out = {
        "queries": len(queries),
        "top20_overlap": round(statistics.fmean(overlap), 4),
        "top10_differs": differ,
    }
    print(f"    keyword bounded vs exact: {out}", flush=True)
    return out


def recall(
    conn: psycopg.Connection[Any], qvecs: list[Any], dims: int, ef_search: list[int] = EF_SEARCH
) -> dict:
    exact_sql = (
        f"SELECT e.chunk_id FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id "
        f"JOIN kb.documents d ON d.id = c.document_id WHERE (%(cat)s::text IS NULL OR "
        f"d.category = %(cat)s) ORDER BY e.embedding::vector({dims}) <=> %(v)s, e.chunk_id "
        f"LIMIT 20"
    )
    out: dict[str, Any] = {}
    conn.execute("SET enable_indexscan = off")  # the exact reference: a scan of every vector
    truth = {
        cat: [{r[0] for r in conn.execute(exact_sql, {"v": v, "cat": cat})} for v in qvecs]
        for cat in (None, "c00")
    }
    conn.execute("RESET enable_indexscan")
    for cat in (None, "c00"):
        filters = json.dumps({"category": cat} if cat else {})
        for ef in ef_search:
            hits, times = [], []
            for v, true in zip(qvecs, truth[cat], strict=True):
                params = {"v": v, "f": filters, "ef": ef}
                sql = (
                    "SELECT chunk_id FROM kb.vector_search(%(v)s, 20, %(f)s::jsonb, "
                    "ef_search => %(ef)s)"
                )
                got = {r[0] for r in conn.execute(sql, params)}
                hits.append(len(got & true) / max(len(true), 1))
                times.append(server_ms(conn, sql, params))
            key = f"{'category 1%' if cat else 'no filter'}, ef_search {ef}"
            out[key] = {"recall_at_20": round(statistics.fmean(hits), 4), **summary(times)}
            out[key]["load_average"] = Path("/proc/loadavg").read_text().split()[:3]
            print(
                f"    recall {key}: {out[key]['recall_at_20']} p50 {out[key]['p50']} ms "
                f"p95 {out[key]['p95']} ms (load {out[key]['load_average'][0]})",
                flush=True,
            )
    return out


def plans(conn: psycopg.Connection[Any], typical: tuple[str, Any], long: tuple[str, Any]) -> dict:
    """EXPLAIN ANALYZE of the statements inside each leg (auto_explain, nested statements) for a
    typical query and a worst case: a common word and a long query for the keyword leg, the 1%
    category filter for the vector leg, the long query for hybrid."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in (
        "log_min_duration = 0",
        "log_nested_statements = on",
        "log_analyze = on",
        "log_buffers = on",
        "log_level = notice",
    ):
        conn.execute(f"SET auto_explain.{setting}")
    cases = {
        "keyword, typical": (LEGS["keyword"], {"q": typical[0]}),
        "keyword, common word 'chapter'": (LEGS["keyword"], {"q": "chapter"}),
        "keyword, common word 'chapter', exact (max_postings => NULL)": (
            EXACT_KEYWORD,
            {"q": "chapter"},
        ),
        "keyword, long query": (LEGS["keyword"], {"q": long[0]}),
        "vector, typical": (LEGS["vector"], {"v": typical[1]}),
        "vector, category 1%": (
            'SELECT * FROM kb.vector_search(%(v)s, 20, \'{"category": "c00"}\')',
            {"v": typical[1]},
        ),
        "hybrid, typical": (LEGS["hybrid"], {"q": typical[0], "v": typical[1]}),
        "hybrid, long query": (LEGS["hybrid"], {"q": long[0], "v": long[1]}),
    }
    out = {}
    for name, (sql, params) in cases.items():
        conn.execute(sql, params).fetchall()  # warm
        notices.clear()
        conn.execute(sql, params).fetchall()
        out[name] = {"query": params.get("q"), "plans": list(notices)}
    conn.execute("SET auto_explain.log_min_duration = -1")
    return out


def server_memory(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The server settings that decide whether a warm corpus is served from shared buffers or
    copied from the operating system's cache on every read."""
    names = ("shared_buffers", "effective_cache_size", "work_mem", "huge_pages")
    rows = conn.execute(
        "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY (%s)", (list(names),)
    ).fetchall()
    return {str(name): str(value) for name, value in rows}


PREWARM = """
SELECT count(*)::int, coalesce(sum(public.pg_prewarm(r.relation)), 0)::bigint,
       pg_size_pretty(coalesce(sum(r.bytes), 0)::bigint)
  FROM kb.search_relations() r
"""


def prewarm(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """pg_prewarm (a contrib extension the server ships) over what searches read
    (kb.search_relations(): the kb tables and indexes, the chunks' TOAST, not the postings'
    heap)."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm WITH SCHEMA public")
    started = time.perf_counter()
    row = conn.execute(PREWARM).fetchone()
    assert row is not None
    return {
        "relations": row[0],
        "blocks": row[1],
        "size": row[2],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", required=True, help="pgkb database with real chunks+vectors")
    parser.add_argument(
        "--server", help="admin URL of the server to build on (default: --source's)"
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--scifact", type=Path, default=None, help="BEIR SciFact folder")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--recall-queries", type=int, default=100)
    parser.add_argument(
        "--ef-search",
        default=",".join(map(str, EF_SEARCH)),
        help="ef_search values of the recall measurement",
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--json", type=Path, default=Path("scale_bench.json"))
    parser.add_argument("--keep", action="store_true", help="keep the pgkb_scale_* databases")
    parser.add_argument(
        "--copy-streams",
        type=int,
        default=2,
        help="connections loading the chunks at once (1: one COPY statement)",
    )
    parser.add_argument(
        "--build-only", action="store_true", help="build the corpora (and storage), measure nothing"
    )
    parser.add_argument(
        "--maintenance-work-mem",
        default="512MB",
        help="for the index builds (the HNSW graph of 1M 384-dim vectors needs about 3GB)",
    )
    parser.add_argument(
        "--measure",
        default=",".join(PARTS),
        help=f"which measurements, comma-separated (default all: {','.join(PARTS)})",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure again the databases a --keep run built (build figures from its --json)",
    )
    parser.add_argument(
        "--vectors",
        choices=VECTORS,
        default=VECTORS[0],
        help="how the vectors beyond the real ones are made (see synthetic_vectors; round two: "
        "noise)",
    )
    parser.add_argument(
        "--revector",
        action="store_true",
        help="with --reuse: replace only the vectors of the kept corpora by those --vectors "
        "gives (kb.embeddings loaded again, HNSW index rebuilt, VACUUM ANALYZE), then measure; "
        "give the --source and --scifact the corpora were built with",
    )
    parser.add_argument(
        "--prewarm",
        action="store_true",
        help="before measuring, read what searches read (kb.search_relations()) into shared "
        "buffers with pg_prewarm; give the server a shared_buffers that holds it "
        "(BENCHMARKS.md: memory)",
    )
    parser.add_argument(
        "--db-suffix",
        default="",
        help="corpus databases are named pgkb_scale_<N><suffix> (several copies on one server)",
    )
    args = parser.parse_args(argv)
    if args.revector and not args.reuse:
        parser.error("--revector replaces the vectors of a kept corpus: give --reuse too")

    from pgvector import Vector

    from loader.providers.embeddings import get_embedder
    from loader.settings import Settings
    from tests.helpers import drop_database, with_dbname

    admin = args.server or with_dbname(args.source, "postgres")
    texts, vectors, model, dims = read_source(args.source)
    sci_texts, claims = read_scifact(args.scifact)
    print(
        f"source: {len(texts)} real chunks with {model} vectors; SciFact: {len(sci_texts)} "
        f"abstracts, {len(claims)} claims",
        flush=True,
    )
    queries = real_queries(args.queries, claims)
    started = time.perf_counter()
    cache = args.json.with_suffix(".queries.json")  # the query vectors, reused by a re-run
    cached = json.loads(cache.read_text()) if cache.exists() else {}
    if cached.get("model") != model or cached.get("queries") != queries:
        embedder = get_embedder(Settings(embedding_model=model, embedding_dims=dims))
        cached = {"model": model, "queries": queries, "vectors": embedder.embed(queries)}
        cache.write_text(json.dumps(cached))
    qvecs = [Vector(v) for v in cached["vectors"]]
    print(
        f"{len(queries)} distinct real queries embedded in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    long_queries = sorted(queries, key=lambda q: -len(q.split()))[:20]

    from loader.db.connect import connect

    previous = json.loads(args.json.read_text()) if args.reuse and args.json.exists() else {}
    results: dict[str, Any] = {
        "model": model,
        "queries": len(queries),
        "sizes": dict(previous.get("sizes", {})),
    }
    for size in [int(s) for s in args.sizes.split(",")]:
        print(f"\n== {size} chunks", flush=True)
        name = f"pgkb_scale_{size}{args.db_suffix}"
        built = previous.get("sizes", {}).get(str(size), {})
        if args.reuse:  # measure the corpus a previous --keep run built, again
            url = with_dbname(admin, name)
            figures = {k: built[k] for k in built if k.startswith(("c", "h", "v", "s", "d"))}
            figures.pop("concurrent", None)
            if args.revector:
                print(f"    new {args.vectors} vectors for {name}", flush=True)
                figures.update(
                    revector(
                        url,
                        size,
                        len(texts) + len(sci_texts),
                        vectors,
                        args.vectors,
                        args.maintenance_work_mem,
                    )
                )
            elif not built:
                parser.error(f"--reuse: {args.json} has no figures of {size} chunks")
        else:
            url, figures = build(
                admin,
                size,
                texts + sci_texts,
                vectors,
                model,
                dims,
                args.copy_streams,
                args.maintenance_work_mem,
                args.vectors,
                name,
            )
        print(f"    built: {json.dumps({k: v for k, v in figures.items() if k != 'storage'})}")
        print(f"    storage: {json.dumps(figures['storage'])}", flush=True)
        if args.build_only:
            results["sizes"][str(size)] = figures
            args.json.write_text(json.dumps(results, indent=2))
            continue
        parts = set(args.measure.split(","))
        with connect(url, autocommit=True) as conn:
            figures["server_memory"] = server_memory(conn)
            if args.prewarm:
                figures["prewarm"] = prewarm(conn)
                print(f"    prewarmed: {figures['prewarm']}", flush=True)
            figures["load_average"] = Path("/proc/loadavg").read_text().split()[:3]
            if "one_client" in parts:
                figures["one_client"] = one_client(conn, queries, qvecs)
            if "extremes" in parts:
                figures["keyword_extremes"] = keyword_extremes(conn, long_queries)
            if "agreement" in parts:
                figures["keyword_agreement"] = keyword_agreement(conn, queries)
            if "recall" in parts:
                figures["recall"] = recall(
                    conn,
                    qvecs[: args.recall_queries],
                    dims,
                    [int(e) for e in args.ef_search.split(",")],
                )
            if "plans" in parts:
                longest = queries.index(long_queries[0])
                figures["plans"] = plans(
                    conn, (queries[0], qvecs[0]), (queries[longest], qvecs[longest])
                )
        if "concurrent" in parts:
            figures["concurrent"] = concurrent(url, args.clients, queries, qvecs)
        figures["load_average_after"] = Path("/proc/loadavg").read_text().split()[:3]
        results["sizes"][str(size)] = figures
        args.json.write_text(json.dumps(results, indent=2))
        if not args.keep:
            drop_database(admin, name)
    if not args.build_only and set(args.measure.split(",")) >= set(PARTS):
        print_table(results)
    print(f"\nJSON: {args.json}")


def print_table(results: dict[str, Any]) -> None:
    print("\n| chunks | leg | p50 ms | p95 ms | p99 ms | 8 clients p50 | p95 | qps |")
    print("|---|---|---|---|---|---|---|---|")
    for size, f in results["sizes"].items():
        for leg in LEGS:
            a, c = f["one_client"][leg], f["concurrent"][leg]
            print(
                f"| {size} | {leg} | {a['p50']} | {a['p95']} | {a['p99']} | {c['p50']} | "
                f"{c['p95']} | {c['qps']} |"
            )
    print("\n| chunks | word | df | bounded ms | exact ms |")
    print("|---|---|---|---|---|")
    for size, f in results["sizes"].items():
        for word in COMMON:
            k = f["keyword_extremes"][word]
            print(f"| {size} | {word} | {k['df']} | {k['bounded_ms']} | {k['exact_ms']} |")
        k = f["keyword_extremes"]["long"]
        print(
            f"| {size} | long ({k['words']} words) p95 | | {k['bounded']['p95']} | "
            f"{k['exact']['p95']} |"
        )
    print("\n| chunks | recall@20 | ef_search | recall | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|")
    for size, f in results["sizes"].items():
        for key, r in f["recall"].items():
            filt, ef = key.split(", ef_search ")
            print(f"| {size} | {filt} | {ef} | {r['recall_at_20']} | {r['p50']} | {r['p95']} |")
    print("\n| chunks | COPY chunks/s | COPY embeddings/s | HNSW build s | bytes/chunk | DB MB |")
    print("|---|---|---|---|---|---|")
    for size, f in results["sizes"].items():
        print(
            f"| {size} | {f['copy_chunks_per_s']} | {f['copy_embeddings_per_s']} | "
            f"{f['hnsw_build_s']} | {f['storage']['total_b_per_chunk']} | "
            f"{f['storage']['database_mb']} |"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
