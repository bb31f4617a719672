"""A 1,000-chunk smoke run of each scenario of ``python -m bench``: the outputs have their
shape, the counts are those asked for, and every timing is a real one (positive, ordered
percentiles). Never a timing threshold: speed is what the suite reports, not what tests assert."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.__main__ import main

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("bench_env")


def bench(command: str, *extra: str) -> dict[str, Any]:
    """``python -m bench COMMAND`` in this process (words split on spaces, then ``extra``)."""
    return main([*command.split(), *extra])


def timings(f: dict[str, Any], n: int) -> None:
    assert f["n"] == n
    assert 0 < f["p50"] <= f["p95"] <= f["p99"] <= f["max"]


def check_record(record: dict[str, Any], path: Path, scenario: str, capfd: Any) -> None:
    """The JSON written is the record returned, with the run's context; the Markdown row
    describing the run is printed."""
    assert json.loads(path.read_text()) == json.loads(json.dumps(record, default=str))
    assert record["scenario"] == scenario
    assert record["machine"]["cores"] >= 1 and record["machine"]["ram_gib"] > 0
    assert len(record["load_average_start"]) == len(record["load_average_end"]) == 3
    assert record["commit"]
    assert record["postgres"]["server_version"] and "shared_buffers" in record["postgres"]
    out = capfd.readouterr().out
    assert "| scenario | commit | machine | load average | PostgreSQL | seconds |" in out
    assert f"| {scenario} | `{record['commit']}` | {record['machine']['cores']} cores" in out


def test_corpus_build(corpus_1000: dict[str, Any], source: str) -> None:
    """1,000 chunks asked, 1,000 chunks with one vector each, the keyword statistics current,
    the HNSW index built after the load; the material's own chunks come first, unchanged."""
    assert corpus_1000["chunks"] == 1000 and corpus_1000["documents"] == 50
    assert corpus_1000["copy_chunks_per_s"] > 0 and corpus_1000["copy_embeddings_per_s"] > 0
    assert corpus_1000["hnsw_build_s"] > 0 and corpus_1000["storage"]["total_b_per_chunk"] > 0
    with psycopg.connect(corpus_1000["url"]) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM kb.chunks), (SELECT count(*) FROM kb.embeddings), "
            "(SELECT chunk_count FROM kb.corpus_stats), "
            "(SELECT count(*) FROM pg_indexes WHERE schemaname = 'kb' AND indexdef LIKE '%hnsw%'), "
            "(SELECT count(DISTINCT document_id) FROM kb.chunks c JOIN kb.documents d "
            "  ON d.id = c.document_id WHERE d.category = 'c00')"
        ).fetchone()
        first = conn.execute(
            "SELECT content FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
            "WHERE d.source_uri = 'bench://1000/0' AND c.chunk_index = 0"
        ).fetchone()
    with psycopg.connect(source) as conn:
        real = conn.execute("SELECT content FROM kb.chunks ORDER BY id LIMIT 1").fetchone()
    assert counts == (1000, 1000, 1000, 1, 1)
    assert first == real


def test_latency(pg_url: str, source: str, corpus_1000: Any, tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "latency.json"
    exact = "keyword exact=SELECT * FROM kb.keyword_search(%(q)s, 20, max_postings => NULL)"
    record = bench(
        f"latency --source {source} --server {pg_url} --sizes 1000,source --queries 12 "
        f"--words 3 --plans --json {path}",
        "--call",
        exact,
    )
    check_record(record, path, "latency", capfd)
    corpora = record["figures"]["corpora"]
    assert set(corpora) == {"1000", "source"}
    built = corpora["1000"]["built"]
    assert corpora["1000"]["chunks"] == built["chunks"] == 1000 and built["kept"] is True
    with psycopg.connect(source) as conn:
        chunks = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()
    assert chunks is not None and corpora["source"]["chunks"] == chunks[0]
    for result in corpora.values():
        assert set(result["calls"]) == {"hybrid", "keyword", "vector", "keyword exact"}
        for f in result["calls"].values():
            timings(f, 12)
        assert set(result["common_words"]) == {"hybrid", "keyword", "keyword exact"}
        for worst in result["common_words"].values():
            assert len(worst["words"]) >= 4 + 1  # the known common words and the corpus's own
            assert worst["ms"] == max(worst["words"].values()) > 0 and worst["ratio"] > 0
        plans = result["plans"]["hybrid, typical"]["plans"]
        assert any("Index Scan" in p or "Seq Scan" in p for p in plans)


def test_latency_runs_setup_and_variants(
    pg_url: str, source: str, corpus_1000: Any, tmp_path: Path, capfd: Any
) -> None:
    """A TOML file of calls: setup SQL, function files created in a schema of their own (the
    listed functions calling each other there), settings around a call; the defaults left out."""
    functions = ROOT / "sql_functions"
    calls = tmp_path / "calls.toml"
    (tmp_path / "setup.sql").write_text(
        "CREATE SCHEMA IF NOT EXISTS kb_old; CREATE OR REPLACE FUNCTION kb_old.leg(q text) "
        "RETURNS SETOF bigint LANGUAGE sql STABLE AS "
        "$$ SELECT chunk_id FROM kb.keyword_search(q, 20) $$;"
    )
    calls.write_text(
        'setup = "setup.sql"\ndefaults = false\n'
        f'[[function]]\nfile = "{functions / "keyword_search.sql"}"\nschema = "kb_copy"\n'
        f'[[function]]\nfile = "{functions / "hybrid_search.sql"}"\nschema = "kb_copy"\n'
        '[[call]]\nname = "old"\nsql = "SELECT * FROM kb_old.leg(%(q)s)"\n'
        '[[call]]\nname = "copy"\nsql = "SELECT * FROM kb_copy.hybrid_search(%(q)s, %(v)s)"\n'
        '[[call]]\nname = "new, other work_mem"\n'
        'sql = "SELECT * FROM kb.keyword_search(%(q)s, 20)"\nsettings = { work_mem = "8MB" }\n'
    )
    path = tmp_path / "again.json"
    record = bench(
        f"latency --source {source} --server {pg_url} --sizes 1000 --queries 6 --words 1 "
        f"--calls {calls} --json {path}"
    )
    check_record(record, path, "latency", capfd)
    result = record["figures"]["corpora"]["1000"]
    assert set(result["calls"]) == {"old", "copy", "new, other work_mem"}
    for f in result["calls"].values():
        timings(f, 6)
    with psycopg.connect(corpus_1000["url"]) as conn:  # the copies are the functions renamed
        same = conn.execute(
            "SELECT (SELECT array_agg(chunk_id) FROM kb_copy.keyword_search('vacuum', 20)) = "
            "(SELECT array_agg(chunk_id) FROM kb.keyword_search('vacuum', 20)), "
            "(SELECT count(*) FROM pg_proc WHERE pronamespace = 'kb_copy'::regnamespace)"
        ).fetchone()
    assert same == (True, 2)


def test_scale(pg_url: str, source: str, corpus_1000: Any, tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "scale.json"
    record = bench(
        f"scale --source {source} --server {pg_url} --sizes 1000 --queries 8 --recall-queries 5 "
        f"--ef-search 40,100 --words 2 --json {path}"
    )
    check_record(record, path, "scale", capfd)
    result = record["figures"]["corpora"]["1000"]
    assert result["chunks"] == 1000 and result["built"]["storage"]["total_b_per_chunk"] > 0
    keys = {f"{f}, {ef}" for f in ("no filter", "category 1%") for ef in (40, 100)}
    assert set(result["recall"]) == keys
    for r in result["recall"].values():
        assert 0 < r["recall_at_20"] <= 1
        timings(r, 5)
    for f in result["calls"].values():
        timings(f, 8)


def test_ingest(pg_url: str, pages: Path, tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "ingest.json"
    record = bench(f"ingest --corpus {pages} --server {pg_url} --watch-rounds 2 --json {path}")
    check_record(record, path, "ingest", capfd)
    f = record["figures"]
    watched = f["watch"]["changes_s"]  # the watcher saw each change, timed from its write
    assert {kind: w["n"] for kind, w in watched.items()} == {
        "new file": 2, "atomic save": 2, "deletion": 1
    }  # fmt: skip
    assert all(0 < w["min"] <= w["median"] <= w["max"] for w in watched.values())
    assert f["watch"]["batch_stages_median_s"]["total"] > 0
    assert f["files"] == len(list(pages.iterdir())) and f["failed"] == 0
    assert f["chunks"] == f["chunks_stored"] > 0 and f["first"]["chunks_per_s"] > 0
    assert f["no_change"] == {**f["no_change"], "unchanged": f["files"], "parsed": 0, "embedded": 0}
    assert f["edit"]["changed"] == 1 and f["edit"]["embedded"] >= 1 and f["edit"]["reused"] > 0
    with psycopg.connect(pg_url) as conn:  # the scenario's database is gone
        left = "SELECT 1 FROM pg_database WHERE datname LIKE 'pgkb_bench_ingest%'"
        assert not conn.execute(left).fetchall()


def test_serve(pg_url: str, source: str, corpus_1000: Any, tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "serve.json"
    record = bench(
        f"serve --source {source} --server {pg_url} --sizes 1000 --queries 4 --tools search,ask "
        f"--json {path}",
        "--endpoint",
        "GET /healthz",
    )
    check_record(record, path, "serve", capfd)
    result = record["figures"]["corpora"]["1000"]
    assert set(result["http"]) == {"POST /v1/search", "POST /v1/embeddings", "GET /healthz"}
    assert set(result["mcp"]) == {"MCP search", "MCP ask"}
    for f in [*result["http"].values(), *result["mcp"].values()]:
        timings(f, 4)
        assert f["errors"] == 0


def test_commands(source: str, tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "commands.json"
    steps = "search,search keyword,ask,mcp,serve"
    record = bench(f"commands --database-url {source} --runs 2 --json {path}", "--steps", steps)
    check_record(record, path, "commands", capfd)
    result = record["figures"]["corpora"]["given"]
    assert set(result) == set(steps.split(","))
    for f in result.values():
        assert f["n"] == 2 and 0 < f["min"] <= f["median"] <= f["max"]
    assert result["search"]["x_keyword"] > 0


@pytest.mark.slow
def test_commands_second_quickstart(source: str, tmp_path: Path, capfd: Any) -> None:
    """A second ``pgkb quickstart``: the first (untimed) ingests the sample into a database
    beside the knowledge base measured."""
    path = tmp_path / "quickstart.json"
    record = bench(f"commands --database-url {source} --runs 1 --steps quickstart --json {path}")
    check_record(record, path, "commands", capfd)
    f = record["figures"]["corpora"]["given"]["quickstart"]
    assert f["n"] == 1 and f["min"] > 0
    with psycopg.connect(source) as conn:
        demo = "SELECT 1 FROM pg_database WHERE datname = 'pgkb_bench_quickstart'"
        assert conn.execute(demo).fetchone()


def test_ask(pg_url: str, source: str, corpus_1000: Any, tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "ask.json"
    record = bench(
        f"ask --source {source} --server {pg_url} --sizes 1000 --queries 6 --json {path}"
    )
    check_record(record, path, "ask", capfd)
    result = record["figures"]["corpora"]["1000"]
    steps = result["steps_ms"]
    assert {"embed", "gate", "search and context", "total"} <= set(steps)
    assert "chat" not in steps and result["chat_model"] is None
    for name in ("embed", "gate", "total"):
        timings(steps[name], 6)
    assert steps["total"]["max"] >= steps["embed"]["max"]
    assert sum(sum(modes.values()) for modes in result["answers"].values()) == 6
    assert set().union(*result["answers"].values()) <= {"extractive", "abstained"}


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("latency --sizes 1000", "say what to measure"),
        ("latency --source {source} --sizes ten", "'ten' is not a number"),
        ("latency --database-url {source} --call x", "write NAME=SQL"),
        ("serve --database-url {source} --tools nap", "unknown nap"),
        ("commands --database-url {source} --steps dance", "unknown dance"),
        ("ingest --corpus {missing}", "not a folder of documents"),
    ],
)
def test_bad_options_are_named(
    command: str, message: str, pg_url: str, source: str, tmp_path: Path
) -> None:
    words = command.format(source=source, missing=tmp_path / "missing")
    with pytest.raises(SystemExit, match=message):
        bench(f"{words} --server {pg_url}")
