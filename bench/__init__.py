"""pgkb's benchmark suite: ``python -m bench <scenario> [options]`` from the repository's root.

Six scenarios, one module each: ``latency`` (search latency inside the database by corpus size),
``ingest`` (ingestion throughput), ``serve`` (warm servers, per request), ``commands`` (whole
``pgkb`` processes), ``ask`` (answering, step by step) and ``scale`` (to a million chunks). Each
writes a JSON file into bench/results/ and prints Markdown tables and one row describing the run
(commit, machine, load average, PostgreSQL settings). ``common`` holds what they share and
``corpus`` builds the corpora they measure.
"""
