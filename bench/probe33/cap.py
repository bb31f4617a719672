# ruff: noqa
"""A probe (deleted after use): keyword_search whose chosen candidates are capped by the setting kwprobe.cap (probe)."""

import sys

text = open(sys.argv[1]).read()
schema = sys.argv[2]
old = "             LIMIT greatest(gin_postings + budget - (SELECT count(*) FROM whole), 0)\n"
assert old in text
new = (
    "             LIMIT least(greatest(gin_postings + budget - (SELECT count(*) FROM whole), 0),"
    " coalesce(nullif(current_setting('kwprobe.cap', true), '')::integer, 100000))\n"
)
text = text.replace(old, new)
print(f"CREATE SCHEMA IF NOT EXISTS {schema};")
print(text.replace("kb.keyword_search(", f"{schema}.keyword_search("))
