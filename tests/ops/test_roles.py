"""pgkb db grant: a reader login searches unqualified and nothing else; a writer loads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from loader.cli import cli
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


@pytest.fixture
def login_role(pg_url: str, db_url: str) -> Iterator[str]:
    """A LOGIN role of the test server, dropped afterwards (roles are server-wide)."""
    name = f"svc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            # its per-database settings go with the test database; membership with the role
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def kb(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "memory.md").write_text(
        "# Resource consumption\n\nmaintenance_work_mem sets the memory used by maintenance "
        "operations such as VACUUM and CREATE INDEX.\n"
    )
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    return settings_env(settings)


def _login(db_url: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(db_url, user=role, password="pw", autocommit=True)


def test_a_reader_searches_unqualified_and_nothing_else(
    kb: dict[str, str], db_url: str, login_role: str
) -> None:
    result = run(["db", "grant", login_role, "--read", "--statement-timeout", "1s"], kb)
    assert result.exit_code == 0, result.output
    assert f'GRANT kb_reader TO "{login_role}"' in result.stdout
    with _login(db_url, login_role) as reader:
        assert reader.execute("SHOW search_path").fetchone() == ("kb, public",)
        rows = reader.execute(
            "SELECT title, source_uri FROM hybrid_search('maintenance_work_mem')"
        ).fetchall()
        assert rows and rows[0][0] == "Resource consumption"
        for statement in (
            "SELECT * FROM kb.chunks",
            "SELECT * FROM chunks",
            "DELETE FROM kb.documents",
            "INSERT INTO kb.settings (key, value) VALUES ('x', '1')",
            "SELECT * FROM kb.remove_documents(source_pattern => '%')",
            "SELECT * FROM kb.stale_documents('1 day')",
            "SELECT kb.register_model('evil', 3, 'x')",
            "SELECT kb.activate_model('fake-embed', 8)",
            "SELECT kb.drop_model('fake-embed')",
            "SELECT * FROM kb.models()",
            "SELECT kb.ingest_run_begin('{}')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute(statement)
        # what the pgkb commands of a reader need (migration 0009): the schema revision, the
        # active model, the counts of kb.stats()
        assert reader.execute("SELECT kb.schema_version()").fetchone() is not None
        assert reader.execute("SELECT name FROM kb.active_model()").fetchone() == ("fake-embed",)
        assert reader.execute("SELECT kb.stats() ->> 'documents'").fetchone() == ("1",)
        assert reader.execute("SHOW statement_timeout").fetchone() == ("1s",)
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            reader.execute("SELECT pg_sleep(3)")
    # nothing was changed by the reader's attempts
    with psycopg.connect(db_url) as admin:
        assert admin.execute("SELECT count(*) FROM kb.documents").fetchone() == (1,)


def test_a_writer_can_run_the_loader(
    kb: dict[str, str], db_url: str, login_role: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    result = run(["db", "grant", login_role, "--write"], kb)
    assert result.exit_code == 0, result.output
    more = tmp_path / "more"
    more.mkdir()
    (more / "wal.md").write_text("# WAL\n\nThe write-ahead log makes commits durable.\n")
    as_writer = psycopg.conninfo.make_conninfo(db_url, user=login_role, password="pw")
    settings = ingest_settings(as_writer, tmp_path, fake_openai)
    report = ingest_paths(settings, [more])
    assert report.exit_code == 0 and report.new == 1, report.to_dict()
    env = {**kb, "PGKB_DATABASE_URL": as_writer}
    stats = run(["stats", "--json"], env)
    assert stats.exit_code == 0, stats.output
    removed = run(["docs", "remove", str(more / "wal.md")], env)
    assert removed.exit_code == 0, removed.output
    with psycopg.connect(db_url) as admin:
        assert admin.execute("SELECT db_user FROM kb.ingest_runs ORDER BY id DESC").fetchone() == (
            login_role,
        )


def test_bad_grants_are_refused(kb: dict[str, str], login_role: str) -> None:
    ghost = run(["db", "grant", "no_such_role_x", "--read"], kb)
    assert ghost.exit_code == 2
    assert "role 'no_such_role_x' does not exist; nothing was granted" in ghost.stderr
    assert "CREATE ROLE" in ghost.stderr
    timeout = run(["db", "grant", login_role, "--read", "--statement-timeout", "soon"], kb)
    assert timeout.exit_code == 2 and "'soon' is not a valid timeout" in timeout.stderr
    neither = run(["db", "grant", login_role], kb)
    assert neither.exit_code == 2 and "--read (search) or --write (load)" in neither.stderr
