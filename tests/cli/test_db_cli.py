"""`pgkb db ...`: the database the CLI uses, and its errors for bad databases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def test_upgrade_then_status_on_an_empty_database(empty_db_url: str, tmp_path: Path) -> None:
    env = {"PGKB_DATABASE_URL": empty_db_url, "PGKB_DATA_DIR": str(tmp_path)}
    result = run(["db", "upgrade"], env)
    assert result.exit_code == 0, result.output
    status = run(["db", "status", "--json"], env)
    data = json.loads(status.stdout)
    assert data["schema_revision"] == data["head_revision"]
    assert data["pgvector"] and data["documents"] == 0
    assert data["embedded"] is False
    assert run(["db", "url"], env).stdout.strip() == empty_db_url
    # what searches read, against shared_buffers: an empty knowledge base fits, so no hint
    with psycopg.connect(empty_db_url) as conn:
        row = conn.execute(
            "SELECT pg_size_pretty(sum(bytes)::bigint),"
            " pg_size_pretty(pg_size_bytes(current_setting('shared_buffers')))"
            " FROM kb.search_relations()"
        ).fetchone()
    assert row is not None
    assert (data["search_reads"], data["shared_buffers"]) == row
    assert "memory_hint" not in data


def test_status_says_when_shared_buffers_cannot_hold_what_searches_read(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison itself, with sizes a test database cannot reach (6.9 GB read against the
    default 128 MB, as a million-chunk corpus measured): the hint names the guide's section."""
    from loader.db import queries, status

    monkeypatch.setattr(
        queries,
        "SEARCH_MEMORY",
        "SELECT 7205000000::bigint, 134217728::bigint, '6871 MB', '128 MB'",
    )
    out = status._memory(conn)
    assert out["search_reads"] == "6871 MB" and out["shared_buffers"] == "128 MB"
    assert "Memory for a large corpus" in out["memory_hint"]
    monkeypatch.setattr(
        queries, "SEARCH_MEMORY", "SELECT 1::bigint, 134217728::bigint, '1 bytes', '128 MB'"
    )
    assert "memory_hint" not in status._memory(conn)


def test_unreachable_database_is_one_clear_message(tmp_path: Path) -> None:
    env = {
        "PGKB_DATABASE_URL": "postgresql://nobody:secret@127.0.0.1:1/nothing",
        "PGKB_DATA_DIR": str(tmp_path),
    }
    result = run(["db", "upgrade"], env)
    assert result.exit_code == 2
    assert "cannot connect to the database" in result.stderr
    assert "secret" not in result.stderr  # the password is redacted
    assert "Traceback" not in result.output + result.stderr


def test_unmigrated_database_is_refused_with_the_fix(empty_db_url: str) -> None:
    from loader.db.migrations import check_schema
    from loader.errors import DatabaseError

    with psycopg.connect(empty_db_url) as conn, pytest.raises(DatabaseError) as info:
        check_schema(conn)
    assert "pgkb db upgrade" in str(info.value)


def test_schema_made_by_a_newer_pgkb_is_refused(db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE kb.alembic_version SET version_num = '9999'")
    env = {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path)}
    result = run(["db", "upgrade"], env)
    assert result.exit_code == 2
    assert "newer pgkb" in result.stderr and "9999" in result.stderr


def test_a_database_at_a_revision_folded_into_the_baseline_is_refused_unchanged(
    db_url: str, tmp_path: Path
) -> None:
    """0009-0035 were folded into the baseline 0036: `pgkb db upgrade` and the schema check of
    every other command name the revision and the pgkb that upgrades it, exit 2, and change
    nothing."""
    from tests.sql.test_function_store import schema_snapshot

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE kb.alembic_version SET version_num = '0020'")
    before = schema_snapshot(db_url)
    env = {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path)}
    for args in (["db", "upgrade"], ["stats"]):
        result = run(args, env)
        assert result.exit_code == 2, (args, result.output)
        assert "revision 0020, which pgkb 0.1.0 folded into its baseline 0036" in result.stderr
        assert "upgrade it to 0036 with the pgkb of commit 8d1c315 first" in result.stderr
        assert "re-create the database" in result.stderr
        assert "Traceback" not in result.output
    assert schema_snapshot(db_url) == before


def test_bad_setting_exits_2_with_its_name(tmp_path: Path) -> None:
    result = run(["db", "url"], {"PGKB_RRF_K": "x", "PGKB_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert "PGKB_RRF_K" in result.stderr


def test_every_option_shows_its_environment_variable() -> None:
    import click

    def walk(command: click.Command, ctx: click.Context) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                assert param.show_envvar, f"{command.name} --{param.name} hides its variable"
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, parent=ctx, info_name=name))

    walk(cli, click.Context(cli, info_name="pgkb"))


def test_embedded_server_starts_once_and_stops(tmp_path: Path) -> None:
    env = {"PGKB_DATA_DIR": str(tmp_path / "data")}
    first = run(["db", "url"], env)
    assert first.exit_code == 0, first.output
    url = first.stdout.strip()
    assert "/pgkb?host=" in url
    assert run(["db", "url"], env).stdout.strip() == url  # reused, not a second server
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    stop = run(["db", "stop"], env)
    assert stop.exit_code == 0 and "stopped" in stop.stderr
    assert "not running" in run(["db", "stop"], env).stderr
