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


def _load(names: str) -> dict[str, list[dict[str, Any]]]:
    return {
        name: pickle.loads((CACHE / f"abst-{name}.pkl").read_bytes()) for name in names.split(",")
    }


def _rates(rule: Any, rows: list[dict[str, Any]]) -> str:
    un = [r for r in rows if not r["answerable"]]
    an = [r for r in rows if r["answerable"]]
    caught = sum(rule.matching_clause(r["signals"]) is not None for r in un)
    wrong = sum(rule.matching_clause(r["signals"]) is not None for r in an)
    c = f"{caught}/{len(un)} ({caught / len(un):.0%})" if un else "-"
    w = f"{wrong}/{len(an)} ({wrong / len(an):.1%})" if an else "-"
    return f"caught {c:16s} answerable flagged {w}"


def cmd_fit(args: argparse.Namespace) -> None:
    from loader.evaluation.calibrate import Sample, calibrate

    tune = _load(args.tune)
    samples = [
        Sample(f"{name}:{r['id']}", r["signals"], not r["answerable"], group=name)
        for name, rows in tune.items()
        for r in rows
    ]
    rule, report = calibrate(
        samples,
        max_false_positive_rate=args.max_fp,
        max_clauses=args.max_clauses,
    )
    print("rule:", rule.describe())
    print(json.dumps({k: v for k, v in report.items() if "flagged" in k}, indent=1)[:2000])
    for name, rows in tune.items():
        print(f"  tune    {name:22s} {_rates(rule, rows)}")
    if args.heldout:
        for name, rows in _load(args.heldout).items():
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
    fit.add_argument("--save")
    show = sub.add_parser("show")
    show.add_argument("--name", required=True)
    show.add_argument("--signals", required=True)
    args = parser.parse_args()
    {"collect": cmd_collect, "fit": cmd_fit, "show": cmd_show}[args.cmd](args)


if __name__ == "__main__":
    main()
