"""Page-level BM25 as a retriever and as a third fused list, on a fusion-lab question set.

The keyword leg ranks chunks; this lab ranks whole pages (every chunk's heading path and text of
a page parsed as one document, BM25 over pages) and fuses that ranking with the shipped hybrid
ranking (RRF k 10) or with both legs' document rankings. It reads the fusion lab's cached legs
(``bench/fusion_lab.py collect --name NAME``) and the database of PGKB_DATABASE_URL:

    PGKB_DATABASE_URL=... python bench/page_keyword_lab.py --name mt3

Measured on the whole manual's tuning half (README "Retrieval quality"): page BM25 alone is at
best the chunk keyword leg (recall@5 0.677 vs 0.665) and every fused variant is below the
shipped hybrid ranking.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from fusion_lab import BASE, fmt_row, fuse, leg_ranking, load_items, score_set

PAGE_TERMS = """
WITH p AS (
    SELECT d.source_uri,
           to_tsvector('english', string_agg(c.heading_path || ' ' || c.content, ' '
                                             ORDER BY c.chunk_index)) AS tsv
      FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id
     GROUP BY d.source_uri)
SELECT source_uri, (x).lexeme, coalesce(array_length((x).positions, 1), 1)
  FROM (SELECT source_uri, unnest(tsv) AS x FROM p) s
"""

QUERY_LEXEMES = "SELECT unnest(tsvector_to_array(to_tsvector('english', %s)))"

SHIPPED = {**BASE, "k": 10, "vw": 2.0, "kw": 1.0, "kw_exact": 3.0}


def page_bm25(
    lexemes: list[str],
    tf: dict[str, dict[str, int]],
    df: Counter[str],
    dl: dict[str, int],
    b: float,
    k1: float = 1.2,
) -> list[str]:
    n = len(tf)
    avg = sum(dl.values()) / n
    score: dict[str, float] = defaultdict(float)
    for lexeme in lexemes:
        if not df.get(lexeme):
            continue
        idf = math.log(1 + (n - df[lexeme] + 0.5) / (df[lexeme] + 0.5))
        for uri, terms in tf.items():
            f = terms.get(lexeme)
            if f:
                score[uri] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * dl[uri] / avg))
    return sorted(score, key=lambda u: -score[u])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="fusion-lab set name (collect --name)")
    args = parser.parse_args()
    items = load_items(args.name, "")
    with psycopg.connect(os.environ["PGKB_DATABASE_URL"]) as conn:
        tf: dict[str, dict[str, int]] = defaultdict(dict)
        for uri, lexeme, count in conn.execute(PAGE_TERMS):
            tf[uri][lexeme] = count
        query_lexemes = {
            it["id"]: [r[0] for r in conn.execute(QUERY_LEXEMES, (it["text"],))] for it in items
        }
    df: Counter[str] = Counter(lexeme for terms in tf.values() for lexeme in terms)
    dl = {uri: sum(terms.values()) for uri, terms in tf.items()}
    kinds = sorted({it["kind"] for it in items if it["relevant"]})
    for leg in ("vector", "keyword"):
        print(fmt_row(leg, score_set(items, lambda it, leg=leg: leg_ranking(it, leg)), kinds))
    print(fmt_row("shipped hybrid", score_set(items, lambda it: fuse(it, SHIPPED)), kinds))
    for b in (0.5, 0.75, 0.9):
        pages = {it["id"]: page_bm25(query_lexemes[it["id"]], tf, df, dl, b) for it in items}
        alone = score_set(items, lambda it, pages=pages: pages[it["id"]])
        print(fmt_row(f"page bm25 b={b}", alone, kinds))
        for weight in (0.25, 0.5, 1.0):

            def with_pages(
                it: dict[str, Any], weight: float = weight, pages: dict[str, list[str]] = pages
            ) -> list[str]:
                fused: dict[str, float] = defaultdict(float)
                for rank, doc in enumerate(fuse(it, SHIPPED)[:20], start=1):
                    fused[doc] += 1.0 / (10 + rank)
                for rank, doc in enumerate(pages[it["id"]][:20], start=1):
                    fused[doc] += weight / (10 + rank)
                return sorted(fused, key=lambda d: -fused[d])

            row = f"hybrid + page list b={b} weight={weight}"
            print(fmt_row(row, score_set(items, with_pages), kinds))


if __name__ == "__main__":
    main()
