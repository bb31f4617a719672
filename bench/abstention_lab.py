"""Abstention lab: collect each question's retrieval evidence once, then try gate signals and
rules on it in seconds.

``collect`` runs every question of a set through the hybrid search of the database in
PGKB_DATABASE_URL (the pipeline ``pgkb ask`` uses) and caches, per question, the gate's signals
(:func:`loader.answer.abstention.compute_signals`) with the labels (answerable or not, kind, set
half). ``fit`` learns the rule from the tuning halves of several sets at once (each set's
answerable false-flag rate bounded on its own) and prints caught / false per half, tuning and
held-out.

    python bench/abstention_lab.py collect --questions eval/manual/questions-tune.json \
        --name manual-tune
    python bench/abstention_lab.py collect --beir DIR --qrels eval/scifact/train-tune.tsv \
        --name scifact-tune
    python bench/abstention_lab.py fit --tune manual-tune,scifact-tune \
        --heldout manual-heldout,scifact-heldout

Fitting reads only the tuning halves; the held-out halves are only scored.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("PGKB_LAB_CACHE", "/work/cache/quality"))


def _items(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.questions:
        from loader.evaluation.questions import load_questions

        return [
            {
                "id": q.id,
                "text": q.question,
                "kind": q.kind,
                "answerable": bool(q.sources),
                "hand": getattr(q, "hand", None),
            }
            for q in load_questions(Path(args.questions))
        ]
    from loader.evaluation.beir import load_beir

    ds = load_beir(Path(args.beir), qrels_file=Path(args.qrels) if args.qrels else None)
    return [
        {"id": qid, "text": text, "kind": "beir", "answerable": bool(ds.qrels.get(qid))}
        for qid, text in ds.queries.items()
        if qid in ds.qrels
    ]


RAW_TERMS = """
SELECT w.word, array(SELECT unnest(tsvector_to_array(to_tsvector('english', w.word))))
  FROM unnest(%(words)s::text[]) AS w(word)
"""
RAW_VECTOR = "SELECT chunk_id, similarity FROM kb.vector_search(%(emb)s, 20) ORDER BY rank"
RAW_KEYWORD = "SELECT chunk_id, document_id FROM kb.keyword_search(%(text)s, 20) ORDER BY rank"
RAW_EMB = """
SELECT e.chunk_id, e.embedding::text FROM kb.embeddings e
  JOIN kb.active_model() m ON m.id = e.model_id
 WHERE e.chunk_id = ANY(%(ids)s)
"""
RAW_LEX = """
SELECT c.id, c.document_id, tsvector_to_array(c.tsv) FROM kb.chunks c WHERE c.id = ANY(%(ids)s)
"""


def _raw(conn: Any, embedder: Any, text: str, embedding: Any, hits: Any) -> dict[str, Any]:
    """What the candidate signals are computed from: terms, hits' lexemes and vectors, the
    vector leg's top 20, the keyword leg's top 20, and leave-one-word-out query vectors."""
    import re

    import numpy as np
    from pgvector import Vector

    from loader.db import queries

    terms = conn.execute(queries.QUERY_TERMS, {"query": text}).fetchall()
    words = list(dict.fromkeys(re.findall(r"[\w'-]+", text)))
    lex = dict(conn.execute(RAW_TERMS, {"words": words}).fetchall()) if words else {}
    content = [w for w in words if lex.get(w)]
    emb = np.asarray(embedding, dtype=np.float32)
    vec = conn.execute(RAW_VECTOR, {"emb": Vector(emb)}).fetchall()
    kw = conn.execute(RAW_KEYWORD, {"text": text}).fetchall()
    ids = [h.chunk_id for h in hits] + [v[0] for v in vec[:5]]
    hit_lex = {r[0]: (r[1], set(r[2])) for r in conn.execute(RAW_LEX, {"ids": ids}).fetchall()}
    hit_emb = {
        r[0]: np.asarray(json.loads(r[1]), dtype=np.float32)
        for r in conn.execute(RAW_EMB, {"ids": ids}).fetchall()
    }
    loo_texts = [re.sub(rf"(?<![\w'-]){re.escape(w)}(?![\w'-])", " ", text) for w in content]
    probes = embedder.embed(loo_texts + content) if content else []
    return {
        "terms": [(t[0], int(t[1]), float(t[2])) for t in terms],
        "word_lexemes": {w: lex[w] for w in content},
        "hits": [
            {
                "id": h.chunk_id,
                "doc": str(h.document_id),
                "vsim": h.vector_similarity,
                "vrank": h.vector_rank,
                "krank": h.keyword_rank,
                "score": h.score,
            }
            for h in hits
        ],
        "vector": [(int(v[0]), float(v[1])) for v in vec],
        "keyword": [(int(k[0]), str(k[1])) for k in kw],
        "lexemes": {i: sorted(v[1]) for i, v in hit_lex.items()},
        "docs": {i: str(v[0]) for i, v in hit_lex.items()},
        "query_vec": emb,
        "hit_vecs": hit_emb,
        "loo": {w: np.asarray(p, dtype=np.float32) for w, p in zip(content, probes, strict=False)},
        "word_vecs": {
            w: np.asarray(p, dtype=np.float32)
            for w, p in zip(content, probes[len(content) :], strict=False)
        },
    }


PROFILE_SAMPLE = """
SELECT c.id, c.content FROM kb.chunks c
 WHERE length(c.content) > 200
 ORDER BY md5('pgkb-profile:' || c.id::text) LIMIT %(n)s
"""
RAW_VECTOR2 = "SELECT chunk_id, similarity FROM kb.vector_search(%(emb)s, 20) ORDER BY rank"


def _profile(conn: Any, embedder: Any, n: int = 200) -> dict[str, Any]:
    """Pseudo-queries from random chunks (10 consecutive words), their vector leg's top 20."""
    import hashlib
    import re

    import numpy as np
    from pgvector import Vector

    rows = conn.execute(PROFILE_SAMPLE, {"n": n}).fetchall()
    texts, sources = [], []
    for chunk_id, content in rows:
        words = re.findall(r"\S+", content)
        if len(words) < 14:
            continue
        start = int(hashlib.sha256(str(chunk_id).encode()).hexdigest(), 16) % (len(words) - 10)
        texts.append(" ".join(words[start : start + 10]))
        sources.append(chunk_id)
    vecs = embedder.embed(texts)
    out = []
    for source, text, v in zip(sources, texts, vecs, strict=True):
        emb = Vector(np.asarray(v, dtype=np.float32))
        res = conn.execute(RAW_VECTOR2, {"emb": emb}).fetchall()
        out.append({"source": source, "text": text, "vector": [(int(a), float(b)) for a, b in res]})
    return {"pseudo": out}


def cmd_collect(args: argparse.Namespace) -> None:
    from loader.answer.abstention import compute_signals
    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.search import search
    from loader.settings import load_settings

    settings = load_settings()
    embedder = get_embedder(settings)
    items = _items(args)
    rows = []
    started = time.monotonic()
    with connection(settings) as conn:
        for it in items:
            embedding = embedder.embed_query(it["text"])
            hits = search(conn, it["text"], embedding, settings=settings, mode="hybrid")
            signals = compute_signals(conn, it["text"], hits)
            raw = _raw(conn, embedder, it["text"], embedding, hits)
            conn.rollback()
            rows.append({**it, "signals": signals, "raw": raw})
        profile = _profile(conn, embedder)
        conn.rollback()
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / f"prof-{args.name}.pkl").write_bytes(pickle.dumps(profile))
    (CACHE / f"abst-{args.name}.pkl").write_bytes(pickle.dumps(rows))
    print(f"collected {len(rows)} questions ({args.name}) in {time.monotonic() - started:.0f} s")


def _profile_of(name: str) -> dict[str, float]:
    """Quantiles of the pseudo-queries' best similarity (and of their sims' peak) for a set."""
    import numpy as np

    corpus = name.rsplit("-", 1)[0]
    path = CACHE / f"prof-{corpus}-tune.pkl"
    if not path.exists():
        path = CACHE / f"prof-{name}.pkl"
    prof = pickle.loads(path.read_bytes())
    tops = np.array([p["vector"][0][1] for p in prof["pseudo"]])
    return {f"q{q}": float(np.quantile(tops, q / 100)) for q in (5, 10, 25, 50, 75, 90)}


def features(row: dict[str, Any], profile: dict[str, float], delta: float = 0.03) -> dict[str, Any]:
    """Candidate signals computed from a question's raw evidence."""
    import numpy as np

    raw = row["raw"]
    sig = dict(row["signals"])
    terms = {lex: (df, idf) for lex, df, idf in raw["terms"]}
    total = sum(idf for _, idf in terms.values()) or 1.0
    hits = raw["hits"]
    top_ids = [h["id"] for h in hits]
    union = set().union(*(set(raw["lexemes"].get(i, ())) for i in top_ids)) if top_ids else set()
    sig["unknown_share"] = sum(idf for df, idf in terms.values() if df == 0) / total
    sig["union_coverage"] = sum(idf for lex, (_, idf) in terms.items() if lex in union) / total
    # semantic support of each content word: how much the best passage's similarity to the
    # question drops when the word is left out
    q = raw["query_vec"]
    best = max(hits, key=lambda h: h["vsim"] if h["vsim"] is not None else -9, default=None)
    support: dict[str, float] = {}
    salience: dict[str, float] = {}
    if best is not None and best["id"] in raw["hit_vecs"]:
        pv = raw["hit_vecs"][best["id"]]
        for w, v in raw["loo"].items():
            support[w] = float(q @ pv) - float(v @ pv)
            salience[w] = 1 - float(q @ v)
    lex_support: dict[str, float] = {}
    for w, lexemes in raw["word_lexemes"].items():
        for lex in lexemes:
            lex_support[lex] = max(lex_support.get(lex, -9), support.get(w, -9))
    covered = 0.0
    for lex, (_, idf) in terms.items():
        if lex in union or lex_support.get(lex, -9) >= delta:
            covered += idf
    sig["content_coverage"] = covered / total
    uncovered = [(idf, lex) for lex, (_, idf) in terms.items() if lex not in union]
    top_idf = max((idf for _, idf in terms.values()), default=1.0)
    sig["missing_idf"] = max(uncovered)[0] / top_idf if uncovered else 0.0
    if salience:
        focus = max(salience, key=lambda w: salience[w])
        sig["focus_support"] = support[focus]
        sig["focus_lexical"] = float(any(x in union for x in raw["word_lexemes"][focus]))
    top = sig.get("top_similarity")
    if top is not None:
        spread = (profile["q50"] - profile["q10"]) or 1e-6
        sig["relative_similarity"] = (top - profile["q50"]) / spread
        sig["relative_similarity_ratio"] = top / profile["q50"]
    sims = [s for _, s in raw["vector"]]
    if len(sims) >= 10:
        sig["similarity_peak"] = sims[0] - float(np.mean(sims[1:10]))
    kdocs = [d for _, d in raw["keyword"][:5]]
    vdocs = [raw["docs"].get(i) for i, _ in raw["vector"][:1]]
    sig["leg_agreement"] = float(bool(vdocs and vdocs[0] in kdocs))
    return sig


def _load(names: str, delta: float = 0.03) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name in names.split(","):
        rows = pickle.loads((CACHE / f"abst-{name}.pkl").read_bytes())
        profile = _profile_of(name)
        for r in rows:
            r["signals"] = features(r, profile, delta)
        out[name] = rows
    return out


def _rates(rule: Any, rows: list[dict[str, Any]]) -> str:
    un = [r for r in rows if not r["answerable"]]
    an = [r for r in rows if r["answerable"]]
    caught = sum(rule.matching_clause(r["signals"]) is not None for r in un)
    wrong = sum(rule.matching_clause(r["signals"]) is not None for r in an)
    c = f"{caught}/{len(un)} ({caught / len(un):.0%})" if un else "-"
    w = f"{wrong}/{len(an)} ({wrong / len(an):.1%})" if an else "-"
    return f"caught {c:16s} answerable flagged {w}"


LAB_DIRECTIONS = {
    "unknown_share": ">=",
    "union_coverage": "<",
    "content_coverage": "<",
    "missing_idf": ">=",
    "focus_support": "<",
    "focus_lexical": "<",
    "relative_similarity": "<",
    "relative_similarity_ratio": "<",
    "similarity_peak": "<",
    "leg_agreement": "<",
}


def cmd_fit(args: argparse.Namespace) -> None:
    from loader.evaluation.calibrate import DIRECTIONS, Sample, calibrate

    tune = _load(args.tune, args.delta)
    samples = [
        Sample(f"{name}:{r['id']}", r["signals"], not r["answerable"], group=name)
        for name, rows in tune.items()
        for r in rows
    ]
    directions = {**DIRECTIONS, **LAB_DIRECTIONS}
    if args.signals:
        directions = {k: v for k, v in directions.items() if k in args.signals.split(",")}
    rule, report = calibrate(
        samples,
        max_false_positive_rate=args.max_fp,
        max_clauses=args.max_clauses,
        directions=directions,
    )
    print("rule:", rule.describe())
    print(json.dumps({k: v for k, v in report.items() if "flagged" in k}, indent=1)[:2000])
    for name, rows in tune.items():
        print(f"  tune    {name:22s} {_rates(rule, rows)}")
    if args.heldout:
        for name, rows in _load(args.heldout, args.delta).items():
            print(f"  heldout {name:22s} {_rates(rule, rows)}")
    if args.save:
        Path(args.save).write_text(json.dumps(rule.to_json(), indent=1))


def cmd_show(args: argparse.Namespace) -> None:
    keys = args.signals.split(",")
    for name, rows in _load(args.name).items():
        for r in sorted(rows, key=lambda r: (r["answerable"], r["kind"])):
            vals = " ".join(
                f"{k}={r['signals'].get(k):.3f}"
                if isinstance(r["signals"].get(k), float)
                else f"{k}={r['signals'].get(k)}"
                for k in keys
            )
            print(
                f"{name} {'A' if r['answerable'] else 'U'} {r['kind'][:5]} {vals} {r['text'][:70]}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    col = sub.add_parser("collect")
    col.add_argument("--questions")
    col.add_argument("--beir")
    col.add_argument("--qrels")
    col.add_argument("--name", required=True)
    fit = sub.add_parser("fit")
    fit.add_argument("--tune", required=True)
    fit.add_argument("--heldout")
    fit.add_argument("--max-fp", type=float, default=0.04)
    fit.add_argument("--max-clauses", type=int, default=3)
    fit.add_argument("--delta", type=float, default=0.03)
    fit.add_argument("--save")
    fit.add_argument("--signals", help="only these signals (comma-separated)")
    show = sub.add_parser("show")
    show.add_argument("--name", required=True)
    show.add_argument("--signals", required=True)
    args = parser.parse_args()
    {"collect": cmd_collect, "fit": cmd_fit, "show": cmd_show}[args.cmd](args)


if __name__ == "__main__":
    main()
