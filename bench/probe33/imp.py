# ruff: noqa
"""A probe (deleted after use): cap.py's output (keyword_search with the chosen candidates capped by
kwprobe.cap) with the weighing words' postings giving idf * impact instead of idf, as schema imp.
    python cap.py sql_functions/keyword_search.sql cap > cap.sql; python imp.py cap.sql > imp.sql"""

import sys

t = open(sys.argv[1]).read()
old = """            SELECT tp.chunk_id, l.idf
              FROM unnest(posted, posted_idfs) AS l(lexeme, idf)"""
assert t.count(old) == 1
t = t.replace(old, old.replace("l.idf\n", "l.idf * tp.impact\n"))
print(t.replace("cap.keyword_search(", "imp.keyword_search(").replace("SCHEMA IF NOT EXISTS cap;", "SCHEMA IF NOT EXISTS imp;"))
