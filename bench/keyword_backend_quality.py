"""Keyword-leg quality per backend on an ingested knowledge base: recall@5 and MRR@10 of the
documents kb.keyword_search ranks (50 chunks, deduplicated by source; a document is relevant when
its source_uri ends with one of the question's sources), with the SQL BM25 and with
pg_textsearch, and the questions whose document leaves or enters the top 5.

    python bench/keyword_backend_quality.py "$(pgkb db url)" QUESTIONS.json [MORE.json ...]

The knowledge base must hold the questions' corpus and have the pg_textsearch backend
(pgkb db upgrade on a server that loads it). Not the eval gate: the keyword leg alone, cheap
enough to run where the gate's full run is not."""

import json
import sys

import psycopg

url, files = sys.argv[1], sys.argv[2:]
with psycopg.connect(url, autocommit=True) as c:
    for f in files:
        with open(f) as handle:
            qs = [q for q in json.load(handle) if q.get("sources")]
        out = {}
        for backend in ("sql", "pg_textsearch"):
            c.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
            r5 = mrr = 0.0
            per = {}
            for q in qs:
                rows = c.execute(
                    "SELECT source_uri FROM kb.keyword_search(%s, 50)", (q["question"],)
                ).fetchall()
                docs = []
                for (u,) in rows:
                    if u not in docs:
                        docs.append(u)
                rel = [
                    i for i, u in enumerate(docs[:10]) if any(u.endswith(s) for s in q["sources"])
                ]
                hit5 = len({s for s in q["sources"] if any(u.endswith(s) for u in docs[:5])}) / len(
                    q["sources"]
                )
                r5 += hit5
                mrr += 1 / (rel[0] + 1) if rel else 0
                per[q["id"]] = (rel[0] + 1) if rel else None
            out[backend] = {
                "recall@5": round(r5 / len(qs), 3),
                "mrr@10": round(mrr / len(qs), 3),
                "ranks": per,
            }
        lost = [
            i
            for i in out["sql"]["ranks"]
            if out["sql"]["ranks"][i]
            and out["sql"]["ranks"][i] <= 5
            and not (out["pg_textsearch"]["ranks"][i] and out["pg_textsearch"]["ranks"][i] <= 5)
        ]
        won = [
            i
            for i in out["sql"]["ranks"]
            if out["pg_textsearch"]["ranks"][i]
            and out["pg_textsearch"]["ranks"][i] <= 5
            and not (out["sql"]["ranks"][i] and out["sql"]["ranks"][i] <= 5)
        ]
        print(
            f,
            len(qs),
            "sql",
            out["sql"]["recall@5"],
            out["sql"]["mrr@10"],
            "| pg_textsearch",
            out["pg_textsearch"]["recall@5"],
            out["pg_textsearch"]["mrr@10"],
            "| left top 5 with pg_textsearch:",
            lost,
            "entered:",
            won,
        )
