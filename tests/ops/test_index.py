"""Index care: pgkb db reindex and vacuum; HNSW build parameters from the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.errors import ConfigError, SqlState
from loader.ingest.pipeline import ingest_paths
from loader.settings import load_settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, raises_code, settings_env, write_docs


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _index_files(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT c.relname, c.relfilenode FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
        " WHERE c.relnamespace = 'kb'::regnamespace AND x.indisvalid"
    ).fetchall()
    conn.rollback()
    return dict(rows)


def test_reindex_rebuilds_every_index_and_names_one_it_cannot(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai, hnsw_m=8, hnsw_ef_construction=40)
    assert ingest_paths(settings, [root]).exit_code == 0
    env = settings_env(settings)
    hnsw = conn.execute(
        "SELECT reloptions FROM pg_class WHERE relname LIKE 'embeddings_hnsw_model_%'"
    ).fetchone()
    conn.rollback()
    assert hnsw == (["m=8", "ef_construction=40"],)

    before = _index_files(conn)
    result = run(["db", "reindex"], env)
    assert result.exit_code == 0, result.output
    after = _index_files(conn)
    assert set(after) == set(before) and all(after[n] != before[n] for n in before)
    assert f"rebuilt {len(before)} of {len(before)} index(es)" in result.stdout

    with (
        psycopg.connect(db_url, autocommit=True) as admin,
        pytest.raises(psycopg.errors.UniqueViolation),
    ):
        admin.execute("CREATE UNIQUE INDEX CONCURRENTLY emb_bad ON kb.embeddings (model_id)")
    failed = run(["db", "reindex"], env)
    assert failed.exit_code == 1
    assert "kb.emb_bad could not be rebuilt" in failed.stderr
    assert "DROP INDEX CONCURRENTLY kb.emb_bad" in failed.stderr
    assert f"rebuilt {len(before)} of {len(before) + 1} index(es)" in failed.stdout


def test_vacuum_analyzes_every_kb_table(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    env = settings_env(ingest_settings(db_url, tmp_path, fake_openai))
    result = run(["db", "vacuum"], env)
    assert result.exit_code == 0, result.output
    tables = conn.execute(
        "SELECT count(*) FROM pg_class WHERE relnamespace = 'kb'::regnamespace AND relkind = 'r'"
    ).fetchone()[0]
    assert f"vacuumed and analyzed {tables} table(s)" in result.stdout
    rows = conn.execute(
        "SELECT relname FROM pg_stat_user_tables WHERE schemaname = 'kb'"
        " AND (last_vacuum IS NULL OR last_analyze IS NULL)"
    ).fetchall()
    assert rows == []


def test_models_add_takes_hnsw_parameters_and_bad_ones_are_refused(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    env = settings_env(ingest_settings(db_url, tmp_path, fake_openai))
    result = run(
        [
            "models",
            "add",
            "m2",
            "--dims",
            "8",
            "--provider",
            "openai",
            "--hnsw-m",
            "12",
            "--hnsw-ef-construction",
            "48",
        ],
        env,
    )
    assert result.exit_code == 0, result.output
    options = conn.execute(
        "SELECT c.reloptions FROM pg_class c JOIN kb.embedding_models m"
        " ON c.relname = 'embeddings_hnsw_model_' || m.id WHERE m.name = 'm2'"
    ).fetchone()
    assert options == (["m=12", "ef_construction=48"],)
    with pytest.raises(ConfigError, match="hnsw_ef_construction must be between 2 \\* hnsw_m"):
        load_settings(env={}, hnsw_m=32, hnsw_ef_construction=40)
    with raises_code(SqlState.INVALID_ARGUMENT, match="at least 2 \\* m"):
        conn.execute("SELECT kb.register_model('m3', 3, 'x', '{}', 32, 40)")
