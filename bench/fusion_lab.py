"""Fusion lab: collect both retrievers' candidates once, then score fusion variants in seconds.

``collect`` runs every query of a set through ``kb.vector_search`` and ``kb.keyword_search``
(deep candidate lists, with each keyword candidate's share of the query's IDF mass) against the
database of PGKB_DATABASE_URL and caches the rows under /work/cache/quality/. ``grid`` re-fuses
the cached lists in Python under many parameter settings and prints document-level recall@5,
MRR@10 and nDCG@10 per kind. The Python fusion mirrors the SQL of ``kb.hybrid_search``
(weighted RRF, the keyword leg weighed by its IDF share, lead slots) and ``pgkb eval``'s document
ranking (the first request of 20 chunks, then doubled requests with as many candidates while
fewer than 10 documents came back), so with ``"pipeline": true`` (the ``shipped`` row) its
figures are the ones ``pgkb eval`` prints for the same database; a chosen setting is then
implemented in SQL and checked with ``pgkb eval``.

    python bench/fusion_lab.py collect --questions eval/manual/questions-tune.json --name mt
    python bench/fusion_lab.py collect --beir DIR --qrels eval/scifact/train-tune.tsv --name st
    python bench/fusion_lab.py grid --name mt
    python bench/fusion_lab.py grid --name mt --grid '{"pipeline":[true],"lead":[0,2,3,5]}'

Tuning reads only tuning sets.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import pickle
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from loader.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k
from loader.evaluation.questions import label_ranking

CACHE = Path(os.environ.get("PGKB_LAB_CACHE", "/work/cache/quality"))

COLLECT_SQL = """
WITH q AS (SELECT * FROM kb.search_query(%(text)s)),
n AS (SELECT greatest(s.chunk_count, 1)::float8 AS n FROM kb.corpus_stats s),
terms AS (
    SELECT l.lexeme, ln(1 + (n.n - coalesce(ts.df, 0) + 0.5) / (coalesce(ts.df, 0) + 0.5)) AS idf
      FROM q, n, unnest(q.lexemes) AS l(lexeme)
      LEFT JOIN kb.term_stats ts ON ts.lexeme = l.lexeme)
SELECT k.chunk_id, d.source_uri, k.rank, k.score, k.strict_match,
       (SELECT sum(t.idf) FILTER (WHERE c.tsv @@ (quote_literal(t.lexeme))::tsquery)
               / nullif(sum(t.idf), 0) FROM terms t) AS coverage,
       length(c.tsv) AS dl, c.token_count, c.heading_path
  FROM kb.keyword_search(
           %(text)s, %(depth)s,
           bm25_k1 => coalesce(nullif(current_setting('lab.k1', true), '')::float8, 0.9),
           bm25_b => coalesce(nullif(current_setting('lab.b', true), '')::float8, 0.75),
           heading_weight => coalesce(nullif(current_setting('lab.hw', true), '')::float8, 1.0)) k
  JOIN kb.chunks c ON c.id = k.chunk_id
  JOIN kb.documents d ON d.id = k.document_id
 ORDER BY k.rank
"""

VECTOR_SQL = """
SELECT v.chunk_id, v.source_uri, v.rank, v.similarity
  FROM kb.vector_search(%(emb)s, %(depth)s) v ORDER BY v.rank
"""

QUERY_SQL = "SELECT strict_first, identifiers, lexemes FROM kb.search_query(%(text)s)"


def load_set(args: argparse.Namespace) -> list[dict[str, Any]]:
    items = []
    if args.questions:
        for q in json.loads(Path(args.questions).read_text()):
            items.append(
                {
                    "id": q["id"],
                    "text": q["question"],
                    "kind": q["kind"],
                    "relevant": {s: 1 for s in q["sources"]},
                    "suffix": True,
                }
            )
    else:
        from loader.evaluation.beir import load_beir

        ds = load_beir(args.beir, qrels_file=args.qrels)
        for qid, text in ds.queries.items():
            items.append(
                {
                    "id": qid,
                    "text": text,
                    "kind": "beir",
                    "relevant": ds.qrels[qid],
                    "suffix": False,
                }
            )
    return items


def embed_all(texts: list[str]) -> dict[str, list[float]]:
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    settings = load_settings()
    path = CACHE / f"emb-{hashlib.sha256(settings.embedding_model.encode()).hexdigest()[:8]}.pkl"
    cache: dict[str, list[float]] = pickle.loads(path.read_bytes()) if path.exists() else {}
    missing = [t for t in texts if t not in cache]
    if missing:
        embedder = get_embedder(settings)
        for t in missing:
            cache[t] = embedder.embed_query(t)
        path.write_bytes(pickle.dumps(cache))
    return {t: cache[t] for t in texts}


def leg_path(name: str, leg: str, tag: str = "") -> Path:
    return CACHE / f"legs-{name}-{leg}{'-' + tag if tag else ''}.pkl"


FIRST_DEPTH = 20
"""The keyword leg's list as kb.hybrid_search's first request reads it (keyword_candidates 20:
kb.keyword_search's bound on common words depends on match_count, so a deep list's first 20
rows can differ from it)."""


def cmd_collect(args: argparse.Namespace) -> None:
    import numpy as np
    import psycopg
    from pgvector import Vector
    from pgvector.psycopg import register_vector

    from loader.db.connect import database_url
    from loader.settings import load_settings

    CACHE.mkdir(parents=True, exist_ok=True)
    items = load_set(args)
    url = database_url(load_settings())
    legs = args.legs.split(",")
    with psycopg.connect(url) as conn:
        register_vector(conn)
        if args.keyword_sql:
            conn.execute(Path(args.keyword_sql).read_text())
        for setting in args.set or []:
            key, value = setting.split("=", 1)
            conn.execute("SELECT set_config(%s, %s, true)", (key, value))
        if "vector" in legs:
            embs = embed_all([it["text"] for it in items])
            rows = {}
            for it in items:
                p = {
                    "emb": Vector(np.asarray(embs[it["text"]], dtype=np.float32)),
                    "depth": args.depth,
                }
                rows[it["id"]] = conn.execute(VECTOR_SQL, p).fetchall()
            leg_path(args.name, "vector").write_bytes(pickle.dumps(rows))
        if "keyword" in legs:
            rows = {}
            for it in items:
                p = {"text": it["text"], "depth": args.depth}
                first = {"text": it["text"], "depth": FIRST_DEPTH}
                rows[it["id"]] = {
                    "query": conn.execute(QUERY_SQL, p).fetchone(),
                    "rows": conn.execute(COLLECT_SQL, p).fetchall(),
                    "first": conn.execute(COLLECT_SQL, first).fetchall(),
                }
            leg_path(args.name, "keyword", args.tag).write_bytes(pickle.dumps(rows))
        conn.rollback()
    leg_path(args.name, "items").write_bytes(pickle.dumps(items))
    print(f"collected {legs} for {len(items)} queries ({args.name} {args.tag})")


def load_items(name: str, tag: str) -> list[dict[str, Any]]:
    items = pickle.loads(leg_path(name, "items").read_bytes())
    vector = pickle.loads(leg_path(name, "vector").read_bytes())
    keyword = pickle.loads(leg_path(name, "keyword", tag).read_bytes())
    for it in items:
        it["vector"] = vector[it["id"]]
        it["keyword"] = keyword[it["id"]]["rows"]
        it["keyword_first"] = keyword[it["id"]].get("first") or it["keyword"][:FIRST_DEPTH]
        it["query"] = keyword[it["id"]]["query"]
    return items


# --- fusion ---------------------------------------------------------------------------------


def pipeline_ranking(it: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """Document ranking as ``pgkb eval`` builds it (loader.evaluation.runner.ranked_documents):
    ask for 20 chunks (vector and keyword candidates max(configured, limit)), take their
    documents in order, and while fewer than 10 came back double the request."""
    limit, docs = 20, []
    while True:
        n_v, n_k = max(c["vc"], limit), max(c["kc"], limit)
        kw = it["keyword_first"] if n_k == FIRST_DEPTH else it["keyword"][:n_k]
        chunks = fused_chunks(it, c, it["vector"][:n_v], kw)[:limit]
        for _chunk_id, uri in chunks:
            if uri not in docs:
                docs.append(uri)
        if len(docs) >= 10 or len(chunks) < limit or limit >= 400:
            return docs[:10]
        limit *= 2


def keyword_share(it: dict[str, Any], kw: list[Any]) -> float:
    """The IDF share of the query's lexemes held by the keyword leg's best chunk."""
    return float(kw[0][5] or 0.0) if kw else 0.0


def fused_chunks(
    it: dict[str, Any], c: dict[str, Any], vec: list[Any], kw: list[Any]
) -> list[tuple[int, str]]:
    """kb.hybrid_search's rows (chunk id, document) for these two candidate lists."""
    strict_first = bool(it["query"][0])
    share = keyword_share(it, kw)
    power = share ** c["qp"] if c.get("qp") else 1.0
    kw_w = c["kw_exact"] if strict_first else c["kw"] * power
    uri: dict[int, str] = {}
    score: dict[int, float] = defaultdict(float)
    best: dict[int, int] = {}
    for chunk_id, source, rank, _sim in vec:
        uri[chunk_id], best[chunk_id] = source, rank
        score[chunk_id] += c["vw"] / (c["k"] + rank)
    for row in kw:
        chunk_id, source, rank = row[0], row[1], row[2]
        uri[chunk_id], best[chunk_id] = source, min(best.get(chunk_id, rank), rank)
        score[chunk_id] += kw_w / (c["k"] + rank)
    order = sorted(score, key=lambda i: (-score[i], best[i], i))
    if c.get("cap"):  # max_per_document
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for i in order:
            if seen[uri[i]] < c["cap"]:
                seen[uri[i]] += 1
                kept.append(i)
        order = kept
    slot = c.get("lead") or 0
    if slot:  # lead slots: a confident leg's best chunk goes just before the row at the slot
        leads = {vec[0][0]} if vec else set()
        if kw and (strict_first or share >= c.get("lead_share", 0.5)):
            leads.add(kw[0][0])
        pos = {i: n for n, i in enumerate(order, start=1)}
        order.sort(key=lambda i: (slot - 0.5 if i in leads and pos[i] > slot else pos[i], pos[i]))
    return [(i, uri[i]) for i in order]


def fuse(it: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """Document ranking of one query under fusion config ``c`` (best first)."""
    if c.get("pipeline"):
        return pipeline_ranking(it, c)
    vec = it["vector"][: c["vc"]]
    kw = it["keyword"][: c["kc"]]
    strict_first = bool(it["query"][0])
    kw_w = c["kw_exact"] if strict_first else c["kw"]
    if c.get("qp") is not None and kw and (c.get("qstrict") or not strict_first):
        # per-query confidence in the keyword leg: the IDF share of the query's lexemes that
        # its best qn hits contain (1.0: one of them holds every lexeme, rare ones weigh most)
        conf = max((row[5] or 0.0) for row in kw[: c.get("qn", 1)])
        kw_w *= max(c.get("qfloor", 0.0), conf ** c["qp"]) if c["qp"] else 1.0
        if c.get("qthr") is not None and not strict_first:
            kw_w = c["kw"] if conf >= c["qthr"] else c.get("qlow", 0.0)
    vw = c["vw"]
    if c["fusion"] == "doc_rrf":  # RRF over each leg's distinct documents, not its chunks
        fused: dict[str, float] = defaultdict(float)
        for weight, rows in ((vw, vec), (kw_w, kw)):
            docs = list(dict.fromkeys(row[1] for row in rows))
            for rank, doc in enumerate(docs, start=1):
                fused[doc] += weight / (c["k"] + rank)
        return sorted(fused, key=lambda d: -fused[d])
    uri: dict[int, str] = {}
    score: dict[int, float] = defaultdict(float)
    vrank: dict[int, int] = {}
    krank: dict[int, int] = {}
    if c["fusion"] == "rrf":
        for chunk_id, source, rank, _sim in vec:
            uri[chunk_id] = source
            vrank[chunk_id] = rank
            score[chunk_id] += vw / (c["k"] + rank)
        for row in kw:
            chunk_id, source, rank = row[0], row[1], row[2]
            cov = row[5] or 0.0
            uri[chunk_id] = source
            krank[chunk_id] = rank
            conf = cov ** c["covp"] if c["covp"] else 1.0
            score[chunk_id] += kw_w * conf / (c["k"] + rank)
    else:  # relative score fusion: min-max normalised scores
        if vec:
            sims = [r[3] for r in vec]
            lo, hi = min(sims), max(sims)
            for chunk_id, source, rank, sim in vec:
                uri[chunk_id] = source
                vrank[chunk_id] = rank
                score[chunk_id] += vw * ((sim - lo) / (hi - lo) if hi > lo else 1.0)
        if kw:
            ss = [r[3] for r in kw]
            lo, hi = min(ss), max(ss)
            if c["fusion"] == "rsf0":
                lo = 0.0
            for row in kw:
                chunk_id, source, rank, s = row[0], row[1], row[2], row[3]
                cov = row[5] or 0.0
                uri[chunk_id] = source
                krank[chunk_id] = rank
                conf = cov ** c["covp"] if c["covp"] else 1.0
                score[chunk_id] += kw_w * conf * ((s - lo) / (hi - lo) if hi > lo else 1.0)
    chunks = sorted(
        score,
        key=lambda i: (-score[i], min(vrank.get(i, 10**6), krank.get(i, 10**6)), i),
    )
    # document evidence: the sum of a document's best `doc_n` chunk scores (decayed)
    doc_score: dict[str, float] = defaultdict(float)
    doc_count: dict[str, int] = defaultdict(int)
    first: dict[str, int] = {}
    for pos, i in enumerate(chunks):
        d = uri[i]
        if d not in first:
            first[d] = pos
        if doc_count[d] < c["doc_n"]:
            doc_score[d] += score[i] * (c["doc_decay"] ** doc_count[d])
            doc_count[d] += 1
    # a third, document-level list: documents ranked by a document vector (see docvec_ranks)
    if c.get("dv") and c.get("dvw"):
        for rank, d in enumerate(it["docvec"][c["dv"]][: c.get("dvn", 20)], start=1):
            if d not in first:
                first[d] = 10**6 + rank
            doc_score[d] += c["dvw"] / (c["k"] + rank)
    ranked = sorted(doc_score, key=lambda d: (-doc_score[d], first[d]))
    if c.get("lead"):  # the lead slots, on documents
        leads = [r[1] for r in vec[:1]]
        if kw and (strict_first or keyword_share(it, kw) >= c.get("lead_share", 0.5)):
            leads.append(kw[0][1])
        pos = {d: n for n, d in enumerate(ranked, start=1)}
        slot = c["lead"]
        ranked.sort(key=lambda d: (slot - 0.5 if d in leads and pos[d] > slot else pos[d], pos[d]))
    return ranked


def attach_docvec(items: list[dict[str, Any]], path: Path) -> None:
    """Each query's document rankings by document vectors (centroid, title, ...)."""
    import numpy as np

    data = pickle.loads(path.read_bytes())
    embs = embed_all([it["text"] for it in items])
    for it in items:
        q = np.asarray(embs[it["text"]], dtype=np.float32)
        it["docvec"] = {}
        for kind in ("centroid", "title", "ptitle"):
            sims = data[kind] @ q
            order = np.argsort(-sims)[:100]
            it["docvec"][kind] = [data["uris"][i] for i in order]


def leg_ranking(it: dict[str, Any], leg: str) -> list[str]:
    """One leg's documents in order (the keyword leg: its first 20 rows, then the deep list's)."""
    docs: list[str] = []
    for row in [*it["keyword_first"], *it["keyword"]] if leg == "keyword" else it[leg]:
        if row[1] not in docs:
            docs.append(row[1])
    return docs


def score_set(items: list[dict[str, Any]], rank_fn: Any) -> dict[str, dict[str, float]]:
    by_kind: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for it in items:
        if not it["relevant"]:
            continue
        docs = rank_fn(it)[:10]
        if it["suffix"]:
            docs = label_ranking(docs, list(it["relevant"]))
        m = (
            recall_at_k(docs, it["relevant"], 5),
            mrr_at_k(docs, it["relevant"], 10),
            ndcg_at_k(docs, it["relevant"], 10),
        )
        by_kind[it["kind"]].append(m)
        by_kind["all"].append(m)
    return {
        k: {
            "r5": statistics.mean(x[0] for x in v),
            "mrr": statistics.mean(x[1] for x in v),
            "ndcg": statistics.mean(x[2] for x in v),
            "n": len(v),
        }
        for k, v in by_kind.items()
    }


BASE = {
    "fusion": "rrf",
    "vc": 20,
    "kc": 20,
    "k": 60,
    "vw": 1.0,
    "kw": 1.0,
    "kw_exact": 1.0,
    "covp": 0.0,
    "doc_n": 1,
    "doc_decay": 1.0,
}


SHIPPED = {
    **BASE,
    "pipeline": True,
    "k": 10,
    "vw": 2.0,
    "kw": 1.5,
    "kw_exact": 3.0,
    "qp": 2.0,
    "lead": 3,
    "lead_share": 0.5,
}
"""kb.hybrid_search's defaults (rrf_k 10, vector_weight 2, keyword_weight 1.5,
exact_keyword_weight 3, keyword_confidence 2, lead_slot 3) and pgkb eval's document ranking."""


def fmt_row(name: str, res: dict[str, dict[str, float]], kinds: list[str]) -> str:
    cells = [f"{res['all']['r5']:.3f} {res['all']['ndcg']:.3f}"]
    cells += [f"{res[k]['r5']:.3f}" if k in res else "  -  " for k in kinds]
    return f"{name:60s} " + "  ".join(cells)


def cmd_grid(args: argparse.Namespace) -> None:
    items = load_items(args.name, args.tag)
    if args.docvec:
        attach_docvec(items, Path(args.docvec))
        kinds = sorted({i["kind"] for i in items if i["relevant"]})
        for kind in ("centroid", "title", "ptitle"):
            res = score_set(items, lambda it, kind=kind: it["docvec"][kind])
            print(fmt_row("docvec " + kind, res, kinds))
    kinds = sorted({it["kind"] for it in items if it["relevant"]})
    print(f"{'config':60s} r@5   ndcg   " + "  ".join(f"{k[:5]:5s}" for k in kinds))
    for leg in ("vector", "keyword"):
        print(fmt_row(leg, score_set(items, lambda it, leg=leg: leg_ranking(it, leg)), kinds))
    print(fmt_row("shipped", score_set(items, lambda it: fuse(it, SHIPPED)), kinds))
    grid = json.loads(args.grid) if args.grid else {}
    keys = list(grid)
    results = []
    for values in itertools.product(*(grid[k] for k in keys)):
        base = SHIPPED if grid.get("pipeline") == [True] else BASE
        c = {**base, **dict(zip(keys, values, strict=True))}
        res = score_set(items, lambda it, c=c: fuse(it, c))
        name = " ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True)) or "base"
        results.append((res["all"][args.sort], name, res))
    if args.top:
        results.sort(key=lambda r: -r[0])
        results = results[: args.top]
    for _, name, res in results:
        print(fmt_row(name, res, kinds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    col = sub.add_parser("collect")
    col.add_argument("--questions")
    col.add_argument("--beir")
    col.add_argument("--qrels")
    col.add_argument("--name", required=True)
    col.add_argument("--depth", type=int, default=100)
    col.add_argument("--keyword-sql", help="SQL file run first (a variant keyword_search)")
    col.add_argument("--set", action="append", help="a setting for the variant: lab.x=value")
    col.add_argument("--legs", default="vector,keyword")
    col.add_argument("--tag", default="")
    grid = sub.add_parser("grid")
    grid.add_argument("--name", required=True)
    grid.add_argument("--tag", default="")
    grid.add_argument("--docvec", help="pickle of document vectors (uris, centroid, title, ...)")
    grid.add_argument("--grid", help='JSON {"param": [values]} over the fusion config')
    grid.add_argument("--sort", default="r5")
    grid.add_argument("--top", type=int)
    args = parser.parse_args()
    {"collect": cmd_collect, "grid": cmd_grid}[args.cmd](args)


if __name__ == "__main__":
    main()
