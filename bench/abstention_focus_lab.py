"""Focus-coverage lab: the ``focus_coverage`` signal (:mod:`loader.answer.abstention.focus`) of
every question of collected sets, added to their cached signals, without re-running retrieval.

It reads ``abst-<name>.pkl`` (``abstention_lab.py collect``) and the vector leg's top passages per
question (``legs-<tag>-vector.pkl``), computes the signal with the shipped functions (word
lexemes from the database, single words embedded by the configured model, cached in
``wordemb.pkl``), and writes ``abst-<name>-focus.pkl`` for ``abstention_lab.py fit``.

    python bench/abstention_focus_lab.py --db URL --name handbook-tune --legs ht
"""

from __future__ import annotations

import argparse
import os
import pickle
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

CACHE = Path(os.environ.get("PGKB_LAB_CACHE", "/work/cache/quality"))


def main() -> None:
    from loader.answer.abstention.focus import (
        TOP_PASSAGES,
        focus_coverage,
        focus_words,
        question_words,
    )
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--legs", required=True)
    args = parser.parse_args()
    embedder = get_embedder(load_settings())
    cache_file = CACHE / "wordemb.pkl"
    cache: dict[str, list[float]] = (
        pickle.loads(cache_file.read_bytes()) if cache_file.exists() else {}
    )

    def embed(words: Sequence[str]) -> list[list[float]]:
        need = [w for w in dict.fromkeys(words) if w not in cache]
        for start in range(0, len(need), 256):
            batch = need[start : start + 256]
            for w, v in zip(batch, embedder.embed(batch), strict=True):
                cache[w] = list(v)
        return [list(cache[w]) for w in words]

    rows = pickle.loads((CACHE / f"abst-{args.name}.pkl").read_bytes())
    legs = pickle.loads((CACHE / f"legs-{args.legs}-vector.pkl").read_bytes())
    started = time.monotonic()
    with psycopg.connect(args.db) as conn:
        for r in rows:
            ids = [int(h[0]) for h in legs[r["id"]][:TOP_PASSAGES]]
            words = question_words(r["text"])
            lexemes = {
                w: list(ls or [])
                for w, ls in conn.execute(
                    "SELECT w, array(SELECT l.lexeme FROM unnest(to_tsvector('english', w)) l)"
                    " FROM unnest(%s::text[]) AS w",
                    (words,),
                ).fetchall()
            }
            focus = focus_words(words, lexemes)
            by_lower = {w.lower(): lexemes[w] for w in words}
            texts, holds = [], set()
            for heading, content, tsv in conn.execute(
                "SELECT heading_path, content, tsvector_to_array(tsv) FROM kb.chunks"
                " WHERE id = ANY(%s::bigint[])",
                (ids,),
            ).fetchall():
                texts.append(f"{heading}\n{content}")
                holds.update(tsv)
            held = {w: bool(set(by_lower[w]) & holds) for w in focus}
            r["signals"] = {
                **r["signals"],
                "focus_coverage": focus_coverage(focus, held, texts, embed),
            }
            r["focus"] = {w: held[w] for w in focus}
            conn.rollback()
    (CACHE / f"abst-{args.name}-focus.pkl").write_bytes(pickle.dumps(rows))
    cache_file.write_bytes(pickle.dumps(cache))
    print(f"{args.name}: {len(rows)} questions in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
