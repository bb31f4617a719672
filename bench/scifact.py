"""SciFact (BEIR) retrieval benchmark for the SQL retrievers: load, embed, tune, evaluate.

Loads a BEIR dataset straight into kb.documents / kb.chunks with COPY (one chunk per abstract:
heading_path = title, content = abstract; no loader, no model needed for the keyword leg), then
ranks documents by the best chunk of each, and prints nDCG@10, recall@5, recall@100 and MRR@10.

    python bench/scifact.py load                       # once: a database `pgkb_scifact`
    python bench/scifact.py keyword                    # ts_rank vs BM25 (defaults)
    python bench/scifact.py grid --k1 0.9,1.2,1.5 --b 0.5,0.75,0.9 --heading 1,2,3
    python bench/scifact.py embed                      # vectors cached in /work/cache (~5 min CPU)
    python bench/scifact.py eval                       # keyword (both), vector, hybrid

The server is PGKB_DATABASE_URL's (its database is replaced by --db), or pgkb's embedded server
in PGKB_DATA_DIR. Vectors are cached under --cache (never committed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from loader.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k

DATASET = Path("/work/shared/datasets/scifact-train")
CACHE = Path("/work/cache/scifact")
NAMESPACE = uuid.UUID("6f1c3a52-4a8e-4f61-9d3c-1d2b3c4d5e6f")


def server_url(db: str) -> str:
    from loader.db.connect import database_url
    from loader.settings import load_settings
    from tests.helpers import with_dbname

    return with_dbname(database_url(load_settings()), db)


def read_dataset(
    path: Path,
) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, dict[str, int]]]:
    corpus = [json.loads(line) for line in (path / "corpus.jsonl").open(encoding="utf-8")]
    queries = {}
    for line in (path / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with (path / "qrels.tsv").open(encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    queries = {qid: text for qid, text in queries.items() if qid in qrels}
    return corpus, queries, qrels


def cmd_load(args: argparse.Namespace) -> None:
    from loader.db.migrations import upgrade
    from tests.helpers import create_database, drop_database

    admin = server_url("postgres")
    drop_database(admin, args.db)
    url = create_database(admin, args.db)
    upgrade(url)
    corpus, _, _ = read_dataset(args.dataset)
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        with conn.cursor().copy(
            "COPY kb.documents (id, source_uri, title, content_sha, category) FROM STDIN"
        ) as copy:
            for doc in corpus:
                did = str(doc["_id"])
                sha = hashlib.sha256(doc["text"].encode()).hexdigest()
                copy.write_row(
                    (uuid.uuid5(NAMESPACE, did), did, doc.get("title") or did, sha, "scifact")
                )
        with conn.cursor().copy(
            "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
            "token_count) "
            "FROM STDIN"
        ) as copy:
            for doc in corpus:
                did = str(doc["_id"])
                text = doc["text"]
                sha = hashlib.sha256(text.encode()).hexdigest()
                copy.write_row(
                    (
                        uuid.uuid5(NAMESPACE, did),
                        0,
                        doc.get("title") or "",
                        text,
                        sha,
                        len(text.split()),
                    )
                )
        conn.execute("ANALYZE kb.documents, kb.chunks, kb.term_stats")
        n = conn.execute("SELECT chunk_count, total_lexemes FROM kb.corpus_stats").fetchone()
    print(
        f"loaded {len(corpus)} documents into {args.db} in {time.perf_counter() - started:.1f} s; "
        f"corpus_stats = {n}"
    )


def _embedder() -> Any:
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    return get_embedder(load_settings(env={}))


def cmd_embed(args: argparse.Namespace) -> None:
    import numpy as np
    from pgvector.psycopg import register_vector

    corpus, queries, _ = read_dataset(args.dataset)
    args.cache.mkdir(parents=True, exist_ok=True)
    doc_file = args.cache / "corpus-minilm.npy"
    query_file = args.cache / "queries-minilm.npy"
    embedder = _embedder()
    if not doc_file.exists():
        started = time.perf_counter()
        texts = [f"{d.get('title') or ''}\n{d['text']}" for d in corpus]
        np.save(doc_file, np.asarray(embedder.embed(texts), dtype=np.float32))
        print(f"embedded {len(texts)} abstracts in {time.perf_counter() - started:.0f} s")
    if not query_file.exists():
        np.save(query_file, np.asarray(embedder.embed(list(queries.values())), dtype=np.float32))
    vectors = np.load(doc_file)
    url = server_url(args.db)
    with psycopg.connect(url) as conn:
        register_vector(conn)
        model_id = conn.execute(
            "SELECT kb.register_model(%s, %s, 'local')", (embedder.name, embedder.dims)
        ).fetchone()[0]
        ids = dict(
            conn.execute(
                "SELECT d.source_uri, c.id FROM kb.chunks c "
                "JOIN kb.documents d ON d.id = c.document_id"
            ).fetchall()
        )
        conn.execute("DELETE FROM kb.embeddings WHERE model_id = %s", (model_id,))
        with conn.cursor().copy(
            "COPY kb.embeddings (chunk_id, model_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "int4", "vector"])
            for doc, vec in zip(corpus, vectors, strict=True):
                copy.write_row((ids[str(doc["_id"])], model_id, vec))
        conn.execute(f"REINDEX INDEX kb.embeddings_hnsw_model_{int(model_id)}")
        conn.execute("ANALYZE kb.embeddings")
    print(f"stored {len(vectors)} vectors (model id {model_id})")


def _query_vectors(args: argparse.Namespace, queries: dict[str, str]) -> dict[str, Any]:
    import numpy as np

    vectors = np.load(args.cache / "queries-minilm.npy")
    return dict(zip(queries, vectors, strict=True))


def evaluate(
    conn: psycopg.Connection[Any],
    sql: str,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    params: Any,
) -> dict[str, float]:
    rows: dict[str, list[float]] = {"ndcg@10": [], "recall@5": [], "recall@100": [], "mrr@10": []}
    latencies = []
    for qid, text in queries.items():
        started = time.perf_counter()
        ranked = [r[0] for r in conn.execute(sql, params(qid, text)).fetchall()]
        latencies.append(time.perf_counter() - started)
        rel = qrels[qid]
        rows["ndcg@10"].append(ndcg_at_k(ranked, rel, 10))
        rows["recall@5"].append(recall_at_k(ranked, rel, 5))
        rows["recall@100"].append(recall_at_k(ranked, rel, 100))
        rows["mrr@10"].append(mrr_at_k(ranked, rel, 10))
    result = {k: statistics.fmean(v) for k, v in rows.items()}
    latencies.sort()
    result["p50_ms"] = 1000 * latencies[len(latencies) // 2]
    return result


KEYWORD = """SELECT source_uri FROM kb.keyword_search(%s, 100, keyword_ranking => %s,
             bm25_k1 => %s, bm25_b => %s, heading_weight => %s, max_postings => %s)
             ORDER BY rank"""
VECTOR = "SELECT source_uri FROM kb.vector_search(%s, 100) ORDER BY rank"
HYBRID = """SELECT h.source_uri FROM kb.hybrid_search(%s, %s, match_count => 100,
            vector_candidates => %s, keyword_candidates => %s, rrf_k => %s)
            WITH ORDINALITY AS h ORDER BY h.ordinality"""


def _print(name: str, m: dict[str, float]) -> None:
    print(
        f"| {name:<42} | {m['ndcg@10']:.3f} | {m['recall@5']:.3f} | {m['recall@100']:.3f} "
        f"| {m['mrr@10']:.3f} | {m['p50_ms']:6.1f} |",
        flush=True,
    )


def _header() -> None:
    print(
        "| retriever                                  | nDCG@10 | R@5 | R@100 | MRR@10 | p50 ms |"
    )
    print("|---|---|---|---|---|---|")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def cmd_keyword(args: argparse.Namespace) -> None:
    _, queries, qrels = read_dataset(args.dataset)
    if args.limit:
        queries = dict(list(queries.items())[: args.limit])
    _header()
    with psycopg.connect(server_url(args.db)) as conn:
        for ranking in args.rankings.split(","):
            m = evaluate(
                conn,
                KEYWORD,
                queries,
                qrels,
                lambda _q, t, r=ranking: (
                    t,
                    r,
                    args.k1[0],
                    args.b[0],
                    args.heading[0],
                    args.max_postings or None,
                ),
            )
            _print(f"keyword {ranking}", m)


def cmd_grid(args: argparse.Namespace) -> None:
    _, queries, qrels = read_dataset(args.dataset)
    if args.limit:
        queries = dict(list(queries.items())[: args.limit])
    _header()
    with psycopg.connect(server_url(args.db)) as conn:
        for k1 in args.k1:
            for b in args.b:
                for h in args.heading:
                    m = evaluate(
                        conn,
                        KEYWORD,
                        queries,
                        qrels,
                        lambda _q, t, k1=k1, b=b, h=h: (
                            t,
                            "bm25",
                            k1,
                            b,
                            h,
                            args.max_postings or None,
                        ),
                    )
                    _print(f"bm25 k1={k1} b={b} heading={h}", m)


def cmd_eval(args: argparse.Namespace) -> None:
    from pgvector.psycopg import register_vector

    _, queries, qrels = read_dataset(args.dataset)
    vectors = _query_vectors(args, queries)
    _header()
    with psycopg.connect(server_url(args.db)) as conn:
        register_vector(conn)
        for ranking in ("ts_rank", "bm25"):
            m = evaluate(
                conn,
                KEYWORD,
                queries,
                qrels,
                lambda _q, t, r=ranking: (
                    t,
                    r,
                    args.k1[0],
                    args.b[0],
                    args.heading[0],
                    args.max_postings or None,
                ),
            )
            _print(f"keyword {ranking}", m)
        _print("vector", evaluate(conn, VECTOR, queries, qrels, lambda q, _t: (vectors[q],)))
        for k in args.rrf_k:
            for cands in (20, 100):
                m = evaluate(
                    conn,
                    HYBRID,
                    queries,
                    qrels,
                    lambda q, t, c=cands, k=k: (t, vectors[q], c, c, k),
                )
                _print(f"hybrid RRF k={k}, {cands}+{cands} candidates", m)


def rrf(
    vec: list[tuple[int, str]], kw: list[tuple[int, str]], cands: int, k: int, wv: float, wk: float
) -> list[str]:
    """kb.hybrid_search's fusion replayed in Python on the two legs' rankings (chunk id, doc)."""
    score: dict[int, float] = {}
    best: dict[int, int] = {}
    doc: dict[int, str] = {}
    for weight, ranking in ((wv, vec[:cands]), (wk, kw[:cands])):
        for rank, (chunk, source) in enumerate(ranking, start=1):
            score[chunk] = score.get(chunk, 0.0) + weight / (k + rank)
            best[chunk] = min(best.get(chunk, rank), rank)
            doc[chunk] = source
    order = sorted(score, key=lambda c: (-score[c], best[c], c))
    return [doc[c] for c in order]


def cmd_fusion(args: argparse.Namespace) -> None:
    """RRF settings compared on cached leg rankings (the SQL fusion is golden-tested)."""
    from pgvector.psycopg import register_vector

    _, queries, qrels = read_dataset(args.dataset)
    vectors = _query_vectors(args, queries)
    legs: dict[str, tuple[list[tuple[int, str]], list[tuple[int, str]]]] = {}
    with psycopg.connect(server_url(args.db)) as conn:
        register_vector(conn)
        for qid, text in queries.items():
            vec = conn.execute(
                "SELECT chunk_id, source_uri FROM kb.vector_search(%s, 100) ORDER BY rank",
                (vectors[qid],),
            ).fetchall()
            kw = conn.execute(
                "SELECT chunk_id, source_uri FROM kb.keyword_search(%s, 100, "
                "bm25_k1 => %s, bm25_b => %s) ORDER BY rank",
                (text, args.k1[0], args.b[0]),
            ).fetchall()
            legs[qid] = (vec, kw)
    _header()
    for cands in args.cands:
        for k in args.rrf_k:
            for wk in args.kw_weight:
                rows: dict[str, list[float]] = {
                    "ndcg@10": [],
                    "recall@5": [],
                    "recall@100": [],
                    "mrr@10": [],
                }
                for qid, (vec, kw) in legs.items():
                    ranked = rrf(vec, kw, cands, k, 1.0, wk)
                    rel = qrels[qid]
                    rows["ndcg@10"].append(ndcg_at_k(ranked, rel, 10))
                    rows["recall@5"].append(recall_at_k(ranked, rel, 5))
                    rows["recall@100"].append(recall_at_k(ranked, rel, 100))
                    rows["mrr@10"].append(mrr_at_k(ranked, rel, 10))
                m = {key: statistics.fmean(v) for key, v in rows.items()}
                m["p50_ms"] = 0.0
                _print(f"rrf cands={cands} k={k} kw_weight={wk}", m)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["load", "embed", "keyword", "grid", "eval", "fusion"])
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--db", default="pgkb_scifact")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--k1", type=_floats, default=[0.9])
    parser.add_argument("--b", type=_floats, default=[0.75])
    parser.add_argument("--heading", type=_floats, default=[1.0])
    parser.add_argument("--limit", type=int, default=0, help="first N queries only")
    parser.add_argument("--rankings", default="ts_rank,bm25", help="keyword: rankings to run")
    parser.add_argument("--cands", type=_ints, default=[20, 40, 100], help="fusion: candidates")
    parser.add_argument("--rrf-k", type=_ints, default=[60, 20, 5], help="fusion: RRF k")
    parser.add_argument(
        "--kw-weight", type=_floats, default=[1.0, 1.5, 2.0], help="fusion: keyword weight"
    )
    parser.add_argument(
        "--max-postings", type=int, default=1000, help="kb.keyword_search's bound (0: none)"
    )
    args = parser.parse_args(argv)
    {
        "load": cmd_load,
        "embed": cmd_embed,
        "keyword": cmd_keyword,
        "grid": cmd_grid,
        "eval": cmd_eval,
        "fusion": cmd_fusion,
    }[args.command](args)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
