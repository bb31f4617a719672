# ruff: noqa
"""A probe (deleted after use): top 20 (ids and scores to 9 digits) of kb.keyword_search against
kb0032.keyword_search (migration 0029's text, created by the latency scenario's --calls
bench/probe33/variants.toml) for 300 questions and the 100 most frequent lexemes.
    python bench/probe33/identity.py URL [URL ...]"""

import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from bench import common

for url in sys.argv[1:]:
    with psycopg.connect(url) as conn:
        texts = common.questions(url, 300)
        words = [r[0] for r in conn.execute("SELECT lexeme FROM kb.term_stats ORDER BY df DESC LIMIT 100")]
        same = 0
        for q in texts + words:
            a, b = (
                conn.execute(
                    f"SELECT chunk_id, round(score::numeric, 9) FROM {s}.keyword_search(%s, 20)", (q,)
                ).fetchall()
                for s in ("kb", "kb0032")
            )
            same += a == b
        print(conn.info.dbname, "top 20 identical:", same, "of", len(texts) + len(words), flush=True)
