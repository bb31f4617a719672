"""The commands that moved under their nouns (``pgkb reindex`` is now ``pgkb db reindex``): each
old name still runs the same command, hidden from help and the reference, with exactly one line
on stderr naming the new command (in a ``--json`` run a JSON line, as every note there is); stdout
and the exit code are the new command's, so a cron line or a ``--json`` reader keeps working."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.devtools.reference import cli_commands, cli_markdown

MOVED = {
    "doctor": "db doctor",
    "reindex": "db reindex",
    "vacuum": "db vacuum",
    "graph": "docs graph",
    "remove": "docs remove",
    "stale": "docs stale",
    "reembed": "models reembed",
}

# one call per old name, with the arguments after it; together they cover success (0), a
# document not found (1), bad input (2) and --json output, success and error
CALLS = [
    ["doctor", "--json"],
    ["reindex"],
    ["vacuum"],
    ["graph", "nothing-like-it.md"],
    ["remove", "--json"],
    ["stale", "--older-than", "1d", "--json"],
    ["reembed", "--model", "no-such-model", "--json"],
]


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def test_every_moved_command_has_a_call() -> None:
    assert sorted(call[0] for call in CALLS) == sorted(MOVED)


@pytest.mark.parametrize("args", CALLS, ids=lambda args: args[0])
def test_the_old_name_runs_the_new_command_with_one_line_on_stderr(
    args: list[str], cli_env: dict[str, str]
) -> None:
    old, rest = args[0], args[1:]
    new = run([*MOVED[old].split(), *rest], cli_env)
    before = run(args, cli_env)
    note = f"note: `pgkb {old}` is now `pgkb {MOVED[old]}`; the old name still works"
    assert before.exit_code == new.exit_code
    assert before.stdout == new.stdout
    first, newline, after = before.stderr.partition("\n")
    assert newline and after == new.stderr
    if "--json" in rest:  # stderr of a --json run holds JSON values only
        assert json.loads(first) == {"level": "info", "message": note}
    else:
        assert first == note
    assert "the old name still works" not in new.stderr  # the new name prints no such line


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_old_names_are_hidden_but_answer_help(old: str) -> None:
    listing = CliRunner().invoke(cli, ["--help"])
    assert listing.exit_code == 0
    section = listing.stdout.split("Commands:", 1)[1]
    commands = [line.split()[0] for line in section.splitlines() if line.strip()]
    assert old not in commands
    assert MOVED[old].split()[0] in commands
    helped = CliRunner().invoke(cli, [old, "--help"])
    assert helped.exit_code == 0
    assert helped.stderr.count("\n") == 1 and f"`pgkb {MOVED[old]}`" in helped.stderr
    assert helped.stdout.startswith("Usage: ") and f" {old} [OPTIONS]" in helped.stdout


def test_a_usage_error_under_the_old_name_keeps_its_exit_code_and_json() -> None:
    result = CliRunner().invoke(cli, ["stale", "--json"])  # --older-than is required
    assert result.exit_code == 2
    assert result.stdout.startswith("{") and '"exit_code": 2' in result.stdout
    assert json.loads(result.stderr.splitlines()[0]) == {  # a --json run: JSON on stderr too
        "level": "info",
        "message": "note: `pgkb stale` is now `pgkb docs stale`; the old name still works",
    }


def test_the_reference_shows_the_new_tree_and_not_the_old_names() -> None:
    commands = set(cli_commands())
    assert {f"pgkb {new}" for new in MOVED.values()} <= commands
    assert not {f"pgkb {old}" for old in MOVED} & commands
    top = {c for c in commands if c.count(" ") == 1}
    top_level = ["ask", "collections", "db", "docs", "eval", "ingest", "mcp", "models"]
    top_level += ["quickstart", "search", "serve", "stats", "worker"]
    assert top == {f"pgkb {name}" for name in top_level}
    page = cli_markdown()
    for old, new in MOVED.items():
        assert f"### `pgkb {new}`" in page
        assert f"## `pgkb {old}`" not in page
