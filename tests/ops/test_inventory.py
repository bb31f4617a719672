"""pgkb stats, stale and remove, and the ingestion run log (kb.ingest_runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner

from loader.cli import cli
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import ingest_settings, settings_env, write_docs


def run(args: list[str], env: dict[str, str], **kw: Any) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False, **kw)


def _ingested(db_url: str, tmp_path: Path, fake: FakeOpenAI) -> tuple[Any, dict[str, str], Path]:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake)
    report = ingest_paths(settings, [root])
    assert report.exit_code == 0, report.to_dict()
    return settings, settings_env(settings), root


def _counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM kb.documents), (SELECT count(*) FROM kb.chunks),"
        " (SELECT count(*) FROM kb.embeddings)"
    ).fetchone()
    conn.rollback()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def test_stats_reports_what_the_knowledge_base_holds(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    settings, env, root = _ingested(db_url, tmp_path, fake_openai)
    docs, chunks, embeddings = _counts(conn)
    result = run(["stats", "--json"], env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["documents"], data["chunks"]) == (docs, chunks) == (5, chunks)
    assert data["active_model"]["name"] == "fake-embed"
    assert data["models"] == [
        {
            "id": data["active_model"]["id"],
            "name": "fake-embed",
            "dims": 8,
            "provider": "openai",
            "is_active": True,
            "embeddings": embeddings,
            "missing": 0,
        }
    ]
    assert data["categories"][0]["category"] is None
    assert data["categories"][0]["documents"] == 5 and data["categories"][0]["chunks"] == chunks
    assert data["categories"][0]["oldest_update"] <= data["categories"][0]["newest_update"]
    tables = {t["name"]: t for t in data["tables"]}
    assert {"documents", "chunks", "embeddings", "ingest_runs"} <= set(tables)
    assert tables["chunks"]["total_bytes"] >= tables["chunks"]["index_bytes"] > 0
    indexes = {i["name"]: i for i in data["indexes"]}
    assert indexes[f"embeddings_hnsw_model_{data['active_model']['id']}"]["valid"] is True
    run_row = data["last_runs"][0]
    assert run_row["paths"] == [str(root)]
    assert (run_row["docs_new"], run_row["docs_unchanged"], run_row["docs_failed"]) == (5, 0, 0)
    assert run_row["exit_code"] == 0 and run_row["finished_at"] is not None

    ingest_paths(settings, [root])  # nothing changed: a second run row, newest first
    text = run(["stats"], env)
    assert text.exit_code == 0
    assert "active model: fake-embed (8 dims, openai)" in text.stdout
    assert "exit 0: 0 new, 0 changed, 5 unchanged, 0 pruned, 0 failed" in text.stdout
    assert json.loads(run(["stats", "--json"], env).stdout)["last_runs"][0]["docs_unchanged"] == 5


def test_a_failed_run_is_recorded_with_its_exit_code_and_error(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    write_docs(root)
    fake_openai.script("/v1/embeddings", *[Reply(status=500)] * 5)
    report = ingest_paths(ingest_settings(db_url, tmp_path, fake_openai), [root])
    assert report.exit_code == 2
    row = conn.execute(
        "SELECT exit_code, error, finished_at IS NOT NULL FROM kb.ingest_runs"
    ).fetchone()
    assert row is not None and row[0] == 2 and row[1] and row[2] is True


def test_stale_lists_documents_older_than_an_interval(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    _, env, root = _ingested(db_url, tmp_path, fake_openai)
    old = str(root / "notes.txt")
    conn.execute(
        "UPDATE kb.documents SET updated_at = now() - interval '100 days' WHERE source_uri = %s",
        (old,),
    )
    conn.commit()
    for spelling in ("90d", "12w", "2000h", "3 months"):
        result = run(["docs", "stale", "--older-than", spelling, "--json"], env)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)
        assert [r["source_uri"] for r in rows] == [old], spelling
        assert rows[0]["age"].startswith("100 days")
    assert json.loads(run(["docs", "stale", "--older-than", "200d", "--json"], env).stdout) == []
    assert run(["docs", "stale", "--older-than", "1 year"], env).stderr.startswith("no document")


def test_stale_refuses_what_is_not_an_interval(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = settings_env(ingest_settings(db_url, tmp_path, fake_openai))
    for bad, why in (
        ("banana", "is not an interval"),
        ("90", "is not an interval (no unit)"),
        ("-5 days", "is negative"),
        ("", "is not an interval (no unit)"),
        ("90x", "is not an interval"),
    ):
        result = run(["docs", "stale", "--older-than", bad], env)
        assert result.exit_code == 2, (bad, result.output)
        assert f"--older-than {bad!r} {why}" in result.stderr, result.stderr
        assert "90d" in result.stderr  # the hint says what works


def test_remove_by_path_and_id_reports_what_went(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    _, env, root = _ingested(db_url, tmp_path, fake_openai)
    ids = dict(conn.execute("SELECT source_uri, id FROM kb.documents").fetchall())
    conn.execute(
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type)"
        " VALUES (%s, %s, 'references')",
        (ids[str(root / "notes.txt")], ids[str(root / "page.html")]),
    )
    conn.commit()
    docs, chunks, _ = _counts(conn)
    notes_chunks = conn.execute(
        "SELECT count(*) FROM kb.chunks WHERE document_id = %s", (ids[str(root / "notes.txt")],)
    ).fetchone()[0]
    conn.rollback()

    result = run(
        ["docs", "remove", str(root / "notes.txt"), str(ids[str(root / "page.html")]), "--json"],
        env,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["documents"] == 2 and data["relations"] == 2  # the one edge, seen from both ends
    assert {d["source_uri"] for d in data["documents_removed"]} == {
        str(root / "notes.txt"),
        str(root / "page.html"),
    }
    assert _counts(conn)[0] == docs - 2
    assert _counts(conn)[1] == chunks - data["chunks"] and data["chunks"] >= notes_chunks
    # the keyword statistics followed, and no embedding or edge is left behind
    row = conn.execute(
        "SELECT (SELECT chunk_count FROM kb.corpus_stats), (SELECT count(*) FROM kb.chunks),"
        " (SELECT count(*) FROM kb.document_relations),"
        " (SELECT count(*) FROM kb.embeddings e WHERE NOT EXISTS"
        "   (SELECT 1 FROM kb.chunks c WHERE c.id = e.chunk_id))"
    ).fetchone()
    assert row is not None and row[0] == row[1] and row[2] == 0 and row[3] == 0

    # a relative path means the same file
    relative = run(["docs", "remove", "docs/guides/wal.md"], env)  # the tests run in tmp_path
    assert relative.exit_code == 0, relative.output
    assert "removed 1 document(s)" in relative.stderr


def test_removing_what_does_not_exist_removes_nothing(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    _, env, root = _ingested(db_url, tmp_path, fake_openai)
    before = _counts(conn)
    missing = run(["docs", "remove", str(root / "nope.md")], env)
    assert missing.exit_code == 1
    assert f"no document matches {str(root / 'nope.md')!r}; nothing was removed" in missing.stderr
    mixed = run(
        ["docs", "remove", str(root / "notes.txt"), "00000000-0000-0000-0000-000000000000"], env
    )
    assert mixed.exit_code == 1 and "00000000-0000-0000-0000-000000000000" in mixed.stderr
    pattern = run(["docs", "remove", "--source-like", "%/nothing/%", "--yes"], env)
    assert pattern.exit_code == 1 and "--source-like '%/nothing/%'" in pattern.stderr
    nothing = run(["docs", "remove"], env)
    assert nothing.exit_code == 2 and "name what to remove" in nothing.stderr
    assert _counts(conn) == before


def test_remove_source_like_is_a_dry_run_until_confirmed(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    _, env, root = _ingested(db_url, tmp_path, fake_openai)
    before = _counts(conn)
    pattern = str(root) + "/guides/%"
    dry = run(["docs", "remove", "--source-like", pattern], env)
    assert dry.exit_code == 0, dry.output
    assert "would remove: " + str(root / "guides" / "vacuum.md") in dry.stderr
    assert "nothing removed" in dry.stderr
    assert _counts(conn) == before
    done = run(["docs", "remove", "--source-like", pattern, "--yes"], env)
    assert done.exit_code == 0, done.output
    assert "removed 2 document(s)" in done.stderr
    assert _counts(conn)[0] == before[0] - 2


def test_a_small_ingest_leaves_the_planner_statistics_and_the_index_current(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """After an ingest of a few pages (far below autovacuum's thresholds) the kb tables are
    analyzed (no -1 row estimate; `pgkb stats` shows the real counts) and the GIN index has no
    pending list a search would have to read."""
    _, env, _ = _ingested(db_url, tmp_path, fake_openai)
    docs, chunks, _ = _counts(conn)
    estimates = dict(
        conn.execute(
            "SELECT relname, reltuples FROM pg_class WHERE relnamespace = 'kb'::regnamespace "
            "AND relname IN ('documents', 'chunks', 'embeddings', 'collection_term_stats', "
            "'collection_stats', 'term_postings')"
        ).fetchall()
    )
    assert estimates["chunks"] == chunks and estimates["documents"] == docs
    assert min(estimates.values()) >= 0, estimates
    pending = conn.execute("SELECT gin_clean_pending_list('kb.chunks_tsv_idx')").fetchone()
    conn.rollback()
    assert pending == (0,)
    tables = {t["name"]: t for t in json.loads(run(["stats", "--json"], env).stdout)["tables"]}
    assert (tables["chunks"]["rows"], tables["documents"]["rows"]) == (chunks, docs)
    text = run(["stats"], env).stdout
    assert f"documents {docs}, chunks {chunks}" in text


def test_stats_counts_a_table_never_analyzed_exactly(
    conn: psycopg.Connection[Any], cli_env: dict[str, str]
) -> None:
    conn.execute("INSERT INTO kb.settings (key, value) VALUES ('a', '1'), ('b', '2')")
    conn.commit()
    assert conn.execute(
        "SELECT reltuples FROM pg_class WHERE oid = 'kb.settings'::regclass"
    ).fetchone() == (-1,)
    conn.rollback()
    tables = {t["name"]: t for t in json.loads(run(["stats", "--json"], cli_env).stdout)["tables"]}
    assert tables["settings"]["rows"] == 2


def test_stats_as_a_reader_of_one_collection_says_what_it_does_not_show(
    db_url: str, pg_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    import uuid

    from loader.ops.roles import grant
    from tests.serve_fixtures import _create_role, _drop_role, role_url

    _, env, _ = _ingested(db_url, tmp_path, fake_openai)
    role = f"stats_reader_{uuid.uuid4().hex[:6]}"
    _create_role(pg_url, role)
    try:
        with psycopg.connect(db_url) as owner:
            grant(owner, role, read=True, write=False, collections=["default"])
        as_reader = {**env, "PGKB_DATABASE_URL": role_url(db_url, role)}
        data = json.loads(run(["stats", "--json"], as_reader).stdout)
        assert data["whole_database"] is False and data["models"] == []
        text = run(["stats"], as_reader).stdout
        assert "active model: fake-embed" in text
        assert "no model registered" not in text
        assert "shown to roles that read every collection" in text
        assert f"chunks {data['chunks']}" in text and data["chunks"] > 0
    finally:
        _drop_role(pg_url, role)
