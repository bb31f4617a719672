"""The keyword backend setting: pgkb db upgrade gives a database pg_textsearch when the server
loads it (and says in one line which backend serves and why), db status and doctor show it, the
setting forces either backend, and each collection's bm25 index comes and goes with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.errors import SqlState
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import (
    ingest_settings,
    raises_code,
    settings_env,
    skip_without_pg_textsearch,
    write_docs,
)


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _bm25_indexes(conn: psycopg.Connection[Any]) -> list[str]:
    got = conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'kb'::regnamespace"
        " AND relname LIKE 'chunks\\_bm25\\_%' ORDER BY 1"
    ).fetchall()
    conn.rollback()
    return [r[0] for r in got]


@pytest.fixture
def kb_env(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    return settings_env(settings)


def test_without_the_extension_the_sql_backend_serves_and_says_why(
    kb_env: dict[str, str], conn: psycopg.Connection[Any]
) -> None:
    shown = run(["db", "status"], kb_env)
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.stdout.splitlines() if "keyword_backend:" in x)
    assert line.strip().startswith("keyword_backend: sql (")
    # the setting sql: upgrade leaves the database as it is and says so
    upgraded = run(["db", "upgrade"], {**kb_env, "PGKB_KEYWORD_BACKEND": "sql"})
    assert upgraded.exit_code == 0, upgraded.output
    assert "keyword backend: sql (the keyword_backend setting is sql)" in upgraded.stderr
    assert _bm25_indexes(conn) == []
    # forcing pg_textsearch where the database lacks it: searches fail with PK040, clearly
    conn.execute("SET pgkb.keyword_backend = 'pg_textsearch'")
    with raises_code(SqlState.KEYWORD_BACKEND_UNAVAILABLE, "extension is not installed"):
        conn.execute("SELECT * FROM kb.keyword_search('vacuum')")
    conn.rollback()
    conn.execute("SET pgkb.keyword_backend = 'bm42'")
    with raises_code(SqlState.INVALID_ARGUMENT, "unknown keyword backend 'bm42'"):
        conn.execute("SELECT * FROM kb.keyword_search('vacuum')")
    conn.rollback()
    conn.execute("SET pgkb.keyword_backend = 'sql'")
    assert conn.execute("SELECT count(*) FROM kb.keyword_search('vacuum')").fetchone()[0] > 0
    forced = run(
        ["search", "vacuum", "--mode", "keyword"],
        {**kb_env, "PGKB_KEYWORD_BACKEND": "pg_textsearch"},
    )
    assert forced.exit_code != 0 and "Traceback" not in forced.output
    assert "pg_textsearch" in forced.stderr and "extension is not installed" in forced.stderr
    doctor = run(["db", "doctor"], {**kb_env, "PGKB_KEYWORD_BACKEND": "pg_textsearch"})
    assert "keyword_backend" in doctor.output and "extension is not installed" in doctor.output


def test_upgrade_creates_the_extension_and_an_index_per_collection(
    pg_url: str, kb_env: dict[str, str], conn: psycopg.Connection[Any]
) -> None:
    skip_without_pg_textsearch(pg_url)
    upgraded = run(["db", "upgrade"], kb_env)
    assert upgraded.exit_code == 0, upgraded.output
    line = next(x for x in upgraded.stderr.splitlines() if x.startswith("keyword backend:"))
    assert line.startswith("keyword backend: pg_textsearch (pg_textsearch ")
    collections = [r[0] for r in conn.execute("SELECT name FROM kb.collections ORDER BY 1")]
    assert _bm25_indexes(conn) == sorted(
        conn.execute("SELECT kb.keyword_index_name(%s)", (c,)).fetchone()[0] for c in collections
    )
    shown = run(["db", "status", "--json"], kb_env)
    assert '"keyword_backend": "pg_textsearch (' in shown.stdout
    doctor = run(["db", "doctor"], kb_env)
    assert "pg_textsearch (pg_textsearch" in doctor.output
    # searches go through it: the same first page as the SQL backend for a plain word
    found = run(["search", "vacuum", "--mode", "keyword", "--json"], kb_env)
    sql = run(["search", "vacuum", "--mode", "keyword", "--json"],
              {**kb_env, "PGKB_KEYWORD_BACKEND": "sql"})  # fmt: skip
    assert found.exit_code == 0 and sql.exit_code == 0, found.output + sql.output
    assert json.loads(found.stdout)[0]["source_uri"] == json.loads(sql.stdout)[0]["source_uri"]

    # a new collection gets its index at once; a dropped one loses it
    made = run(["collections", "create", "hr"], kb_env)
    assert made.exit_code == 0, made.output
    hr_index = conn.execute("SELECT kb.keyword_index_name('hr')").fetchone()[0]
    conn.rollback()
    assert hr_index in _bm25_indexes(conn)
    dropped = run(["collections", "drop", "hr", "--yes"], kb_env)
    assert dropped.exit_code == 0, dropped.output
    assert hr_index not in _bm25_indexes(conn)
    # an index gone (dropped by hand): auto falls back to SQL, upgrade builds it again
    default_index = conn.execute("SELECT kb.keyword_index_name('default')").fetchone()[0]
    conn.execute(f"DROP INDEX kb.{default_index}")
    conn.commit()
    assert conn.execute("SELECT kb.keyword_backend()").fetchone() == ("sql",)
    conn.rollback()
    again = run(["db", "upgrade"], kb_env)
    assert "keyword backend: pg_textsearch (" in again.stderr
    assert default_index in _bm25_indexes(conn)


def test_auto_serves_many_collections_at_once_with_the_sql_bm25(
    pg_url: str, conn: psycopg.Connection[Any]
) -> None:
    """Each collection is one index scan whose cost grows with the number of indexes
    (bench/keyword_collections_probe.py, in git at 8c7f547: at 10,000 chunks 10 collections beat
    the SQL BM25, 100 are 8 times slower): auto reads at most 8 non-empty collections with
    pg_textsearch."""
    skip_without_pg_textsearch(pg_url)
    conn.execute("CREATE EXTENSION pg_textsearch")
    names = [f"team{i}" for i in range(9)]
    for name in names:
        conn.execute("INSERT INTO kb.collections (name) VALUES (%s)", (name,))
        doc = conn.execute(
            "INSERT INTO kb.documents (source_uri, title, content_sha, collection)"
            " VALUES (%s, 'Guide', 'x', %s) RETURNING id",
            (f"{name}/guide.md", name),
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count)"
            " VALUES (%s, 0, 'vacuum reclaims storage', 'x', 3)",
            (doc,),
        )
    conn.execute("SELECT kb.build_keyword_indexes()")
    conn.commit()
    backend = "SELECT kb.keyword_backend(%s)"
    assert conn.execute(backend, (None,)).fetchone() == ("sql",)  # nine at once
    assert conn.execute(backend, (names[:8],)).fetchone() == ("pg_textsearch",)
    assert conn.execute(backend, (names[:1],)).fetchone() == ("pg_textsearch",)
    status = conn.execute("SELECT kb.keyword_backend_status()").fetchone()[0]
    assert status["backend"] == "sql" and "more than 8 collections" in status["reason"]
    conn.execute("SET pgkb.keyword_backend = 'pg_textsearch'")  # forced: every collection
    assert conn.execute(backend, (None,)).fetchone() == ("pg_textsearch",)
    hits = conn.execute("SELECT count(*) FROM kb.keyword_search('vacuum')").fetchone()
    assert hits == (9,)
