"""Word-level abstention lab: per question, per content word, the raw evidence of whether the
best passages cover that word, cached so signal formulas can be tried in seconds.

For each question of a collected set (``abst-<name>.pkl`` of ``abstention_lab.py``) and its
vector leg's top passages (``legs-<tag>-vector.pkl``), it records per content word: its lexemes,
IDF, whether a top passage holds it, the cosine of the word alone to each top passage, and the
best cosine of the question without that word to the top passages (leave one out).

    python bench/abstention_words_lab.py --db URL --name handbook-tune --legs ht
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

CACHE = Path(os.environ.get("PGKB_LAB_CACHE", "/work/cache/quality"))
TOP = 5


def main() -> None:
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--legs", required=True)
    args = parser.parse_args()
    embedder = get_embedder(load_settings())
    rows = pickle.loads((CACHE / f"abst-{args.name}.pkl").read_bytes())
    legs = pickle.loads((CACHE / f"legs-{args.legs}-vector.pkl").read_bytes())
    out = []
    started = time.monotonic()
    with psycopg.connect(args.db) as conn:
        for r in rows:
            hits = legs[r["id"]][:TOP]
            ids = [int(h[0]) for h in hits]
            emb = conn.execute(
                "SELECT e.chunk_id, e.embedding::text FROM kb.embeddings e "
                "JOIN kb.embedding_models m ON m.id = e.model_id AND m.is_active "
                "WHERE e.chunk_id = ANY(%s::bigint[])",
                (ids,),
            ).fetchall()
            vec = {int(c): np.array(eval(v)) for c, v in emb}
            P = np.stack([vec[i] for i in ids if i in vec])
            text = r["text"]
            toks = re.findall(r"[A-Za-z][\w'-]*", text)
            wl = conn.execute(
                "SELECT w, false, array(SELECT l.lexeme FROM unnest(to_tsvector('english', w)) AS l) "
                "FROM unnest(%s::text[]) AS w",
                (toks,),
            ).fetchall()
            lex = {w: list(ls or []) for w, _a, ls in wl}
            content = [w for w in dict.fromkeys(toks) if lex.get(w)]
            allx = sorted({x for w in content for x in lex[w]})
            idf = {
                lx: (float(i), int(d))
                for lx, d, i in conn.execute(
                    "SELECT lexeme, df, idf FROM kb.query_terms(%s)", (" ".join(allx),)
                ).fetchall()
            }
            present = {}
            for cid, ls in conn.execute(
                "SELECT c.id, array(SELECT l.lexeme FROM unnest(c.tsv) AS l WHERE l.lexeme = ANY(%s::text[])) "
                "FROM kb.chunks c WHERE c.id = ANY(%s::bigint[])",
                (allx, ids),
            ).fetchall():
                present[int(cid)] = set(ls or ())
            variants = [
                re.sub(rf"\b{re.escape(w)}\b", " ", text).strip() or w for w in content
            ]
            vecs = np.array(embedder.embed([text, *content, *variants]))
            q = vecs[0]
            wv = vecs[1 : 1 + len(content)]
            vv = vecs[1 + len(content) :]
            sims_q = P @ q
            words = []
            for k, w in enumerate(content):
                lw = lex[w]
                words.append(
                    {
                        "word": w,
                        "lexemes": lw,
                        "idf": max((idf.get(x, (0.0, 0))[0] for x in lw), default=0.0),
                        "df": min((idf.get(x, (0.0, 0))[1] for x in lw), default=0),
                        "present": [bool(set(lw) & present.get(i, set())) for i in ids],
                        "word_sim": (P @ wv[k]).tolist(),
                        "without": (P @ vv[k]).tolist(),
                    }
                )
            out.append(
                {
                    **r,
                    "top_ids": ids,
                    "sims": sims_q.tolist(),
                    "words": words,
                }
            )
            conn.rollback()
    (CACHE / f"words-{args.name}.pkl").write_bytes(pickle.dumps(out))
    print(f"{args.name}: {len(out)} questions in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
