"""Errors on the command line are decided by code, never by message text.

A refusal of one of pgkb's SQL functions reaching the command line is one message, told apart
by its SQLSTATE (``loader.errors.database_error``), never a traceback: ``pgkb docs list`` and
``pgkb stats`` pass ``--collection`` to ``kb.document_list`` and ``kb.stats``, whose collection
check (``kb.collection_scope``) refuses with PK030. A denied privilege names the grant the role
lacks, judged from its memberships (asked of the database), not from PostgreSQL's message."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.errors import InsufficientPrivilege

from loader.cli import cli
from loader.db.connect import privilege_error
from tests.serve_fixtures import _create_role, _drop_role, role_url


@pytest.mark.parametrize("command", [["docs", "list"], ["stats"]], ids=" ".join)
def test_a_refusal_by_code_is_one_message(db_url: str, tmp_path: Path, command: list[str]) -> None:
    env = {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(cli, [*command, "--collection", "nope"], env=env)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert result.stderr.startswith("Error: no collection 'nope' that role ")
    assert "hint: pgkb collections lists the collections you may read" in result.stderr
    as_json = CliRunner().invoke(cli, [*command, "--collection", "nope", "--json"], env=env)
    error = json.loads(as_json.stdout)
    assert as_json.exit_code == 2 and error["exit_code"] == 2
    assert error["error"].startswith("no collection 'nope'") and error["hint"]


# --- a denied privilege: the grant to suggest comes from the role's memberships, not the message


@pytest.fixture
def roles(pg_url: str, db_url: str) -> Iterator[dict[str, str]]:
    """Login roles with no grant, kb_reader's, kb_writer's and both: ``{kind: url}``."""
    suffix = uuid.uuid4().hex[:8]
    made = {kind: f"pgkb_{kind}_{suffix}" for kind in ("none", "reader", "writer", "both")}
    for kind, name in made.items():
        _create_role(pg_url, name)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            for group in {"reader": ["kb_reader"], "writer": ["kb_writer"]}.get(
                kind, ["kb_reader", "kb_writer"] if kind == "both" else []
            ):
                admin.execute(
                    sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(name))
                )
    try:
        yield {kind: role_url(db_url, name) for kind, name in made.items()}
    finally:
        for name in made.values():
            _drop_role(pg_url, name)


DENIED = {  # a statement each role may not run
    "none": "SELECT count(*) FROM kb.documents",
    "reader": "SELECT kb.ingest_run_begin('{}')",
    "writer": "SELECT * FROM kb.keyword_search('x')",
    "both": "SELECT kb.drop_model('x')",
}
HINTS = {
    "none": "--read` to let it search and read, `--write` to load and maintain",
    "reader": "--write` to let it load and maintain",
    "writer": "--read` to let it search and read",
    "both": "has both grants: this is for the knowledge base's owner only",
}


def test_the_grant_a_denied_role_needs_follows_from_its_memberships(
    roles: dict[str, str],
) -> None:
    for kind, url in roles.items():
        with psycopg.connect(url) as conn, pytest.raises(InsufficientPrivilege) as denied:
            conn.execute(DENIED[kind])
        error = privilege_error(denied.value, url)
        assert error.message.startswith(denied.value.diag.message_primary), kind
        assert error.hint is not None and HINTS[kind] in error.hint, (kind, error.hint)
    # when the database cannot be asked, both grants are named
    unreachable = privilege_error(denied.value, None)
    assert unreachable.hint is not None and HINTS["none"] in unreachable.hint


def test_a_role_without_grants_is_told_both_on_the_command_line(
    roles: dict[str, str], tmp_path: Path
) -> None:
    env = {"PGKB_DATABASE_URL": roles["none"], "PGKB_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(cli, ["stats"], env=env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: permission denied"), result.stderr
    assert HINTS["none"] in result.stderr and "Traceback" not in result.output
