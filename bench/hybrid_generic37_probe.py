# ruff: noqa
"""A probe (deleted after use): kb.hybrid_search planned once per session, in schema hy.
python bench/hybrid_generic37_probe.py sql_functions/hybrid_search.sql > hy.sql"""

import sys

t = open(sys.argv[1]).read()
old = "SECURITY DEFINER\nSET search_path = pg_catalog, pg_temp\nAS $$"
assert t.count(old) == 1
t = t.replace(old, old.replace("AS $$", "SET plan_cache_mode = force_generic_plan\nAS $$"))
print("CREATE SCHEMA IF NOT EXISTS hy;\n" + t.replace("kb.hybrid_search(", "hy.hybrid_search("))
