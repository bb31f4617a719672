# ruff: noqa
"""A probe (deleted after use): kb.keyword_search cut after each step (count of that step's rows, no row returned), in
schemas PREFIX0..PREFIX5; 0 = return right after the statistics statement.
    python stages.py FILE PREFIX > stages.sql"""

import sys

STEPS = {
    "1": "whole",
    "2": "(SELECT id FROM weighed) ch",
    "3": "(SELECT id FROM chosen) ch",
    "4": "cands",
    "5": "scored",
}
NULLROW = (
    "        SELECT NULL::bigint, NULL::uuid, NULL::text, NULL::text, NULL::integer,"
    " NULL::text, NULL::text, NULL::integer, NULL::double precision, NULL::boolean\n"
)

text = open(sys.argv[1]).read()
prefix = sys.argv[2]
head = (
    "        SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path,"
    " c.content,\n               r.rank, r.score, coalesce(c.tsv @@ q.strict_query, false)"
)
a = text.index(head)
b = text.index("         ORDER BY r.rank;\n", a) + len("         ORDER BY r.rank;")
out = []
s0 = text.replace(
    "    budget := greatest(max_postings - gin_postings, match_count);",
    "    RETURN;\n    budget := greatest(max_postings - gin_postings, match_count);",
    1,
)
assert s0 != text
out.append(("0", s0))
for n, rows in STEPS.items():
    cut = NULLROW + f"          FROM (SELECT count(*) AS n FROM {rows}) z WHERE z.n < 0;"
    out.append((n, text[:a] + cut + text[b:]))
for n, body in out:
    schema = f"{prefix}{n}"
    body = body.replace("kb.keyword_search(", f"{schema}.keyword_search(")
    print(f"CREATE SCHEMA IF NOT EXISTS {schema};\n{body}")
