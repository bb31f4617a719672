"""pgkb db doctor: clean on a healthy knowledge base; each check fails once, with its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env, write_docs


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _admin(db_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(db_url, autocommit=True)


def _break_server(db_url: str, env: dict[str, str]) -> None:
    env["PGKB_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/nothing"


def _break_pgvector(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn:
        conn.execute("DROP EXTENSION vector CASCADE")


def _break_schema(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn:
        conn.execute("UPDATE kb.alembic_version SET version_num = '0001'")


def _break_functions(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn:  # a hand edit: same signature, other body
        conn.execute(
            "CREATE OR REPLACE FUNCTION kb.active_model()"
            " RETURNS TABLE (id integer, name text, dims integer, provider text)"
            " LANGUAGE sql STABLE SET search_path = kb, public, pg_temp"
            " AS $$ SELECT m.id, m.name, m.dims, m.provider FROM kb.embedding_models m $$"
        )


def _break_indexes(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn, pytest.raises(psycopg.errors.UniqueViolation):
        # fails on the duplicate model ids and leaves an invalid index behind
        conn.execute("CREATE UNIQUE INDEX CONCURRENTLY embeddings_bad ON kb.embeddings (model_id)")


def _break_embeddings(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn:
        conn.execute("DELETE FROM kb.embeddings WHERE chunk_id = (SELECT min(id) FROM kb.chunks)")


def _break_dims(db_url: str, env: dict[str, str]) -> None:
    env["PGKB_EMBEDDING_DIMS"] = "16"  # the database's active model has 8


def _break_settings(db_url: str, env: dict[str, str]) -> None:
    env["PGKB_EMBEDDING_MAX_INPUT_TOKENS"] = "20"  # chunk_tokens is 40


def _break_roles(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn:
        conn.execute("GRANT SELECT ON kb.chunks TO kb_reader")


def _break_public_schema(db_url: str, env: dict[str, str]) -> None:
    with _admin(db_url) as conn:
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")


BREAKERS: dict[str, tuple[Callable[[str, dict[str, str]], None], str]] = {
    "server": (_break_server, "cannot connect"),
    "pgvector": (_break_pgvector, "not installed"),
    "schema": (_break_schema, "kb schema at 0001"),
    "functions": (_break_functions, "kb.active_model differs from sql_functions/active_model.sql"),
    "indexes": (_break_indexes, "invalid: embeddings_bad"),
    "embeddings": (_break_embeddings, "1 chunk(s) without a vector of the active model"),
    "dims": (_break_dims, "configured with fake-embed (16 dims) but the active model is"),
    "settings": (_break_settings, "exceeds its input limit of 20 tokens"),
    "roles": (_break_roles, "kb_reader may not read kb tables (SELECT kb.chunks): expected no"),
    "public_schema": (_break_public_schema, "PUBLIC may create objects in schema public"),
}


@pytest.fixture
def kb(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    return settings_env(settings)


def test_doctor_is_clean_on_a_healthy_knowledge_base(kb: dict[str, str]) -> None:
    result = run(["db", "doctor"], kb)
    assert result.exit_code == 0, result.output
    assert "all checks passed" in result.stdout
    data = json.loads(run(["db", "doctor", "--json"], kb).stdout)
    assert data["ok"] is True
    # keyword_backend has no breaker here: tests/ops/test_keyword_backend.py makes it fail
    expected = list(BREAKERS)
    expected.insert(expected.index("embeddings"), "keyword_backend")
    assert [c["name"] for c in data["checks"]] == expected
    assert all(c["status"] == "ok" for c in data["checks"]), data


@pytest.mark.parametrize("name", list(BREAKERS))
def test_each_check_fails_with_its_explanation_and_fix(
    name: str, kb: dict[str, str], db_url: str
) -> None:
    breaker, detail = BREAKERS[name]
    env = dict(kb)
    breaker(db_url, env)
    result = run(["db", "doctor", "--json"], env)
    assert result.exit_code == 1, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks[name]["status"] == "fail", checks
    assert detail in checks[name]["detail"], checks[name]
    assert checks[name]["fix"] and checks[name]["explanation"]
    text = run(["db", "doctor"], env)
    assert text.exit_code == 1
    assert f"[FAIL] {name}: " in text.stdout and "fix: " in text.stdout


def test_doctor_reads_every_function_file_including_query_terms(
    kb: dict[str, str], db_url: str
) -> None:
    """kb.query_terms (migration 0002) is checked like every function with a file: a hand edit
    is a drift, and kb_reader losing EXECUTE on it (the abstention gate's term statistics) is a
    wrong grant, both named."""
    with _admin(db_url) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION kb.query_terms(query_text text)"
            " RETURNS TABLE (lexeme text, df integer, idf double precision)"
            " LANGUAGE sql STABLE SECURITY DEFINER SET search_path = kb, public, pg_temp"
            " AS $$ SELECT NULL::text, 0, 0.0::double precision WHERE false $$"
        )
        conn.execute("REVOKE EXECUTE ON FUNCTION kb.query_terms(text) FROM kb_reader")
    result = run(["db", "doctor", "--json"], kb)
    assert result.exit_code == 1, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["functions"]["status"] == "fail"
    assert (
        "kb.query_terms differs from sql_functions/query_terms.sql"
        in (checks["functions"]["detail"])
    )
    assert checks["roles"]["status"] == "fail"
    assert "kb_reader may call kb.query_terms: expected yes" in checks["roles"]["detail"]
    assert "hybrid_search" not in checks["roles"]["detail"]  # only what is wrong is named
