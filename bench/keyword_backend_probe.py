"""A probe: why the two keyword backends rank a question set's documents differently.

For every question, the keyword leg's document ranking (as ``pgkb eval`` builds it) with
``pgkb.keyword_backend = sql`` (A), the SQL BM25 without its candidate bound (``max_postings =>
NULL``, A*), and pg_textsearch (B); beside them an exact BM25 computed here from every chunk's
tsvector, moved one step at a time from the SQL BM25's definition to pg_textsearch's:

  V0  distinct lexemes as the length (the SQL BM25)     V1  words (tsvector positions) instead
  V2  words quantized as pg_textsearch stores them       V3  repeated query words counted again
  V4  single-precision arithmetic (pg_textsearch's)

with the same ordering rules (strict matches first when the text asks for exact matching, then
chunks holding every identifier, then score, then chunk id). A question whose metrics differ
between A and B is put down to the steps of the chain A -> A* -> V0 -> ... -> V4 -> B where its
metrics change. Prints each set's mean metrics per ranking and the causes with counts.

    python bench/keyword_backend_probe.py URL --questions eval/handbook/questions-tune.json ...
    python bench/keyword_backend_probe.py URL --beir DATASET --qrels eval/scifact/train-tune.tsv
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from loader.evaluation.questions import label_ranking, load_questions
from loader.evaluation.runner import DEPTH, ranked_documents, score_ranking

K1, B = 0.9, 0.75
DISTINCT = False
STEPS = ["A", "A*", "V0", "V1", "V2", "V3", "V4", "B"]
CAUSE = {
    ("A", "A*"): "SQL candidate bound (max_postings)",
    ("A*", "V0"): "model differs from the SQL BM25",
    ("V0", "V1"): "length: words, not distinct lexemes",
    ("V1", "V2"): "length quantized (fieldnorm)",
    ("V2", "V3"): "repeated query words",
    ("V3", "V4"): "float4 arithmetic (near ties)",
    ("V4", "B"): "pg_textsearch candidates (top-k, rules)",
}


def fieldnorm_table() -> list[int]:
    """Lucene SmallFloat byte4ToInt: 0-39 exact, then groups of 8 with a doubling step."""
    table = list(range(40))
    base, step = 40, 2
    while len(table) < 256:
        table.extend(base + i * step for i in range(8))
        base += 8 * step
        step *= 2
    return table[:256]


FIELDNORM = np.array(fieldnorm_table(), dtype=np.int64)


def quantize(lengths: np.ndarray) -> np.ndarray:
    return FIELDNORM[np.searchsorted(FIELDNORM, lengths, side="right") - 1]


class Corpus:
    """Every chunk's lexemes and counts, per collection, with both lengths."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        rows = conn.execute(
            "SELECT c.id, c.collection, d.source_uri,"
            "       ARRAY(SELECT u.lexeme FROM unnest(c.tsv) u ORDER BY u.lexeme),"
            "       ARRAY(SELECT coalesce(cardinality(u.positions), 1) FROM unnest(c.tsv) u"
            "              ORDER BY u.lexeme)"
            "  FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id ORDER BY c.id"
        ).fetchall()
        self.ids = np.array([r[0] for r in rows], dtype=np.int64)
        self.coll = np.array([r[1] for r in rows], dtype=object)
        self.uri = [r[2] for r in rows]
        self.dl_lex = np.array([len(r[3]) for r in rows], dtype=np.float64)
        self.dl_words = np.array([sum(r[4]) for r in rows], dtype=np.float64)
        self.dl_quant = quantize(self.dl_words.astype(np.int64)).astype(np.float64)
        postings: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for i, r in enumerate(rows):
            for lexeme, tf in zip(r[3], r[4], strict=True):
                postings[lexeme][0].append(i)
                postings[lexeme][1].append(tf)
        self.postings = {
            k: (np.array(v[0], dtype=np.int64), np.array(v[1], dtype=np.float64))
            for k, v in postings.items()
        }
        self.index = {int(c): i for i, c in enumerate(self.ids)}
        self.collections = sorted(set(self.coll))
        self.mask = {c: self.coll == c for c in self.collections}

    def scores(self, lexemes: dict[str, int], variant: str) -> tuple[np.ndarray, np.ndarray]:
        """(score per chunk, holds any lexeme per chunk) under one variant."""
        n = len(self.ids)
        single = variant == "V4"
        score = np.zeros(n, dtype=np.float32 if single else np.float64)
        held = np.zeros(n, dtype=bool)
        # statistics: the SQL BM25 pools the collections read (all here), pg_textsearch's index
        # keeps each collection's
        groups = (
            [np.ones(n, dtype=bool)]
            if variant == "V0"
            else [self.mask[c] for c in self.collections]
        )
        if variant == "V0":
            dl = self.dl_lex
        elif variant == "V1":
            dl = self.dl_words
        else:
            dl = self.dl_quant
        for lexeme, qf in lexemes.items():
            if lexeme not in self.postings:
                continue
            idx, tf = self.postings[lexeme]
            held[idx] = True
            for g in groups:
                sel = g[idx]
                if not sel.any():
                    continue
                big_n = g.sum()
                df = sel.sum()
                total = (self.dl_lex if variant == "V0" else self.dl_words)[g].sum()
                avgdl = total / big_n
                i, t = idx[sel], tf[sel]
                idf = math.log(1 + (big_n - df + 0.5) / (df + 0.5))
                weight = qf if variant in ("V3", "V4") else 1
                if single:
                    f = np.float32
                    norm = f(1) - f(B) + f(B) * (dl[i].astype(np.float32) / f(avgdl))
                    part = f(idf) * ((t.astype(np.float32) * (f(K1) + f(1)))
                                     / (t.astype(np.float32) + f(K1) * norm))  # fmt: skip
                    score[i] += part * f(weight)
                else:
                    norm = 1 - B + B * dl[i] / avgdl
                    score[i] += weight * idf * t * (K1 + 1) / (t + K1 * norm)
        return score.astype(np.float64), held


def chunk_flags(
    conn: psycopg.Connection[Any], text: str
) -> tuple[dict[str, Any], set[int], set[int], set[int]]:
    """The parsed query and the chunks that are strict, exact (identifiers) or dropped."""
    q = conn.execute(
        "SELECT lexemes, strict_first, identifiers, excluded IS NOT NULL OR required IS NOT NULL"
        "       OR required_words IS NOT NULL,"
        "       regexp_replace(left(%s, 20000), '(^|\\s)-(\"[^\"]*\"?|\\S+)', ' ', 'g')"
        "  FROM kb.search_query(%s)",
        (text, text),
    ).fetchone()
    assert q is not None
    parsed = {"lexemes": q[0] or [], "strict_first": q[1], "identifiers": q[2], "words": q[4]}
    strict: set[int] = set()
    exact: set[int] = set()
    dropped: set[int] = set()
    if q[1]:
        strict = {r[0] for r in conn.execute(
            "SELECT c.id FROM kb.chunks c, kb.search_query(%s) q WHERE c.tsv @@ q.strict_query",
            (text,))}  # fmt: skip
    if q[2]:
        exact = {r[0] for r in conn.execute(
            "SELECT c.id FROM kb.chunks c, kb.search_query(%s) q WHERE c.tsv @@ q.any_query"
            " AND NOT EXISTS (SELECT 1 FROM unnest(q.identifiers) i WHERE NOT"
            " (c.heading_path || ' ' || c.content) ~* ('\\m' || i || '\\M'))",
            (text,))}  # fmt: skip
    if q[3]:
        dropped = {r[0] for r in conn.execute(
            "SELECT c.id FROM kb.chunks c, kb.search_query(%s) q WHERE c.tsv @@ q.any_query"
            " AND ((q.excluded IS NOT NULL AND c.tsv @@ q.excluded)"
            "   OR (q.required IS NOT NULL AND NOT c.tsv @@ q.required)"
            "   OR (q.required_words IS NOT NULL AND EXISTS ("
            "       SELECT 1 FROM unnest(q.required_words) i"
            "       WHERE NOT (c.heading_path || ' ' || c.content) ~* ('\\m' || i || '\\M'))))",
            (text,))}  # fmt: skip
    qf = conn.execute(
        "SELECT u.lexeme, coalesce(cardinality(u.positions), 1)"
        "  FROM unnest(to_tsvector('english', %s)) u",
        (parsed["words"],),
    ).fetchall()
    parsed["query_freq"] = dict(qf)
    return parsed, strict, exact, dropped


def model_docs(corpus: Corpus, conn: psycopg.Connection[Any], text: str) -> dict[str, list[str]]:
    parsed, strict, exact, dropped = chunk_flags(conn, text)
    out = {}
    for variant in ("V0", "V1", "V2", "V3", "V4"):
        if variant in ("V3", "V4") and not DISTINCT:
            lexemes = dict(parsed["query_freq"])
        else:
            lexemes = {lex: 1 for lex in parsed["lexemes"]}
        score, held = corpus.scores(lexemes, variant)
        order = []
        for i in np.flatnonzero(held & (score > 0)):
            cid = int(corpus.ids[i])
            if cid in dropped:
                continue
            order.append(
                ((cid in strict) and parsed["strict_first"], cid in exact, score[i], -cid, i)
            )
        order.sort(reverse=True)
        docs: list[str] = []
        for *_, i in order:
            uri = corpus.uri[i]
            if uri not in docs:
                docs.append(uri)
                if len(docs) == DEPTH:
                    break
        out[variant] = docs
    return out


def retriever(conn: psycopg.Connection[Any], backend: str, exact: bool) -> Any:
    def retrieve(text: str, embedding: Any, mode: str, limit: int) -> list[dict[str, Any]]:
        conn.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
        extra = ", max_postings => NULL" if exact else ""
        rows = conn.execute(
            f"SELECT source_uri FROM kb.keyword_search(%s, %s{extra})", (text, limit)
        ).fetchall()
        return [{"source_uri": r[0]} for r in rows]

    return retrieve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--questions", nargs="*", default=[], type=Path)
    parser.add_argument("--beir", type=Path)
    parser.add_argument("--qrels", type=Path)
    parser.add_argument("--json", type=Path, help="write every question's rankings here")
    parser.add_argument(
        "--distinct-query", action="store_true", help="V3, V4: each query lexeme once"
    )
    args = parser.parse_args()
    global DISTINCT
    DISTINCT = args.distinct_query
    sets: list[tuple[str, list[tuple[str, str, str, dict[str, int], bool]]]] = []
    for path in args.questions:
        qs = [(q.id, q.question, q.kind, {s: 1 for s in q.sources}, True)
              for q in load_questions(path) if q.answerable]  # fmt: skip
        sets.append((str(path), qs))
    if args.beir:
        from loader.evaluation.beir import load_beir

        data = load_beir(args.beir, "test", args.qrels)
        sets.append((str(args.qrels or args.beir),
                     [(qid, data.queries[qid], "beir", dict(data.qrels[qid]), False)
                      for qid in data.queries]))  # fmt: skip
    dump = {}
    with psycopg.connect(args.url, autocommit=True) as conn:
        corpus = Corpus(conn)
        print(f"# {len(corpus.ids)} chunks in {len(corpus.collections)} collection(s)")
        actual = {
            "A": retriever(conn, "sql", False),
            "A*": retriever(conn, "sql", True),
            "B": retriever(conn, "pg_textsearch", False),
        }
        for name, questions in sets:
            metrics: dict[str, list[tuple[float, ...]]] = defaultdict(list)
            causes: Counter[str] = Counter()
            lines = []
            for qid, text, kind, relevant, suffix in questions:
                docs = {
                    k: ranked_documents(r, text, [], "keyword", 20)[0] for k, r in actual.items()
                }
                docs.update(model_docs(corpus, conn, text))
                m = {}
                for step in STEPS:
                    ranking = docs[step]
                    if suffix:
                        ranking = label_ranking(ranking, list(relevant))
                    m[step] = tuple(
                        round(v, 6) for v in score_ranking(ranking, relevant, 5).values()
                    )
                    metrics[step].append(m[step])
                dump[f"{name}:{qid}"] = {"text": text, "kind": kind, "docs": docs, "metrics": m}
                if m["A"] == m["B"]:
                    continue
                found = [CAUSE[(a, b)] for a, b in itertools.pairwise(STEPS) if m[a] != m[b]]
                causes.update(found or ["(changes cancel)"])
                better = (
                    "B better"
                    if m["B"][1] > m["A"][1] or (m["B"][1] == m["A"][1] and m["B"][2] > m["A"][2])
                    else "A better"
                )
                lines.append(
                    f"  {qid} [{kind}] {better}: A {m['A']} B {m['B']}: " + "; ".join(found)
                )
            print(f"## {name}: {len(questions)} questions, {len(lines)} differ (A vs B)")
            for step in STEPS:
                cols = list(zip(*metrics[step], strict=True)) if metrics[step] else [[], [], []]
                print(f"  {step:3} recall@5 {np.mean(cols[0]):.3f}  mrr@10 {np.mean(cols[1]):.3f}"
                      f"  ndcg@10 {np.mean(cols[2]):.3f}")  # fmt: skip
            for cause, count in causes.most_common():
                print(f"  cause: {count:3}  {cause}")
            print("\n".join(lines))
            sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
