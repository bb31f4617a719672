"""A probe (deleted after use): kb.keyword_search against a variant schema's, question by
question: are the top 20 equal (ids, order, scores, strict_match)? And the same for
kb.hybrid_search when the variant schema has one. Usage:

    python bench/keyword_equality_probe.py URL SCHEMA [--questions N] [--files F ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common  # noqa: E402


def rows(conn: psycopg.Connection, sql: str, q: str) -> list[tuple]:
    return conn.execute(sql, {"q": q}).fetchall()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("schema")
    p.add_argument("--questions", type=int, default=300)
    p.add_argument("--files", nargs="*", type=Path, default=[])
    p.add_argument("--words", type=int, default=200, help="frequent lexemes queried alone")
    args = p.parse_args()
    texts = common.questions(args.url, args.questions)
    for f in args.files:
        texts += common.read_questions(f)
    with psycopg.connect(args.url, autocommit=True) as conn:
        words = [
            r[0]
            for r in conn.execute(
                "SELECT lexeme FROM kb.term_stats ORDER BY df DESC, lexeme LIMIT %s", (args.words,)
            )
        ]
        texts = list(dict.fromkeys(texts + words))
        kinds = {"same": 0, "ids same, scores differ": 0, "differ": 0}
        worst = 0.0
        examples = []
        for q in texts:
            a = rows(conn, "SELECT chunk_id, rank, score, strict_match FROM kb.keyword_search(%(q)s, 20)", q)
            b = rows(
                conn,
                f"SELECT chunk_id, rank, score, strict_match FROM {args.schema}.keyword_search(%(q)s, 20)",
                q,
            )
            if a == b:
                kinds["same"] += 1
            elif [(r[0], r[1], r[3]) for r in a] == [(r[0], r[1], r[3]) for r in b]:
                kinds["ids same, scores differ"] += 1
                worst = max(worst, max(abs(x[2] - y[2]) for x, y in zip(a, b, strict=True)))
            else:
                kinds["differ"] += 1
                ia, ib = [r[0] for r in a], [r[0] for r in b]
                first = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
                examples.append(
                    {
                        "q": q,
                        "first_diff_rank": first + 1,
                        "len": [len(a), len(b)],
                        "set_equal": set(ia) == set(ib),
                        "scores_at": [a[first][2] if first < len(a) else None,
                                      b[first][2] if first < len(b) else None],
                        "next_scores": [
                            [r[2] for r in a[max(first - 1, 0):first + 2]],
                            [r[2] for r in b[max(first - 1, 0):first + 2]],
                        ],
                    }
                )
    print(json.dumps({"questions": len(texts), "kinds": kinds, "max_score_diff": worst,
                      "differ": examples}, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else str(x)))


if __name__ == "__main__":
    main()
