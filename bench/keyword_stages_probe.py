"""A probe (deleted after use): kb.keyword_search cut after each step, for
bench/keyword_cpu_probe.py. Writes SQL creating, in schemas STAGE_<n>, the function of FILE
whose common-case statement ends after a step (count(*) of that step's rows, no row returned):
whole, weighed, chosen, cands, scored. Usage:

    python bench/keyword_stages_probe.py FILE PREFIX > stages.sql
"""

from __future__ import annotations

import sys

STEPS = {
    "1": "whole",
    "2": "(SELECT id FROM weighed) ch",
    "3": "(SELECT id FROM chosen) ch",
    "4": "cands",
    "5": "scored",
}


def main() -> None:
    text = open(sys.argv[1]).read()
    prefix = sys.argv[2]
    head = (
        "        SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path,"
        " c.content,\n               r.rank, r.score, coalesce(c.tsv @@ q.strict_query, false)"
    )
    a = text.index(head)
    b = text.index("         ORDER BY r.rank;\n", a) + len("         ORDER BY r.rank;")
    for n, rows in STEPS.items():
        cut = (
            "        SELECT NULL::bigint, NULL::uuid, NULL::text, NULL::text, NULL::integer,"
            " NULL::text, NULL::text, NULL::integer, NULL::double precision, NULL::boolean\n"
            f"          FROM (SELECT count(*) AS n FROM {rows}) z WHERE z.n < 0;"
        )
        schema = f"{prefix}{n}"
        body = (text[:a] + cut + text[b:]).replace("kb.keyword_search(", f"{schema}.keyword_search(")
        print(f"CREATE SCHEMA IF NOT EXISTS {schema};\n{body}")


if __name__ == "__main__":
    main()
