"""Escape sequences reached the terminal (second review): ``pgkb docs list``, ``docs show`` and
``graph`` printed titles and paths raw (a window-title sequence, clear-screen, a C1 control were
executed by the terminal); right-to-left overrides and newlines inside paths were printed by
every command. Every command's human output goes through one printable filter
(``loader.safety.echo``); values shown on one line have their newlines escaped; JSON output
escapes C1 controls and bidirectional overrides as ``\\uXXXX``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.ingest.pipeline import ingest_paths
from loader.safety import one_line, printable
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env

EVIL_TITLE = "Evil \x1b]0;pwned\x07\x1b[2J\x9b2J\u202egnp.exe\u2066 title"
HOSTILE = ["\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\x85"]


def test_the_filter_strips_controls_and_bidi_overrides() -> None:
    assert printable(EVIL_TITLE) == "Evil gnp.exe title"
    assert printable("a\u202ab\u202dc\u2067d\u200fe\x85f") == "abcdef"
    assert one_line("docs/new\nline\r\tname.md") == "docs/new\\nline\\r\\tname.md"
    assert "\x1b" not in one_line("x\x1b[31my")


def _leaks(output: str) -> list[str]:
    return [c for c in HOSTILE if c in output]


@pytest.fixture
def evil_kb(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> dict[str, str]:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "evil.md").write_text(
        f"# {EVIL_TITLE}\n\nvacuum text, see [the other](other\u202eevil\nname.md).\n"
    )
    (root / "other\u202eevil\nname.md").write_text(
        "# Other \x1b[31mred\x1b[0m\n\nvacuum again, back to [evil](evil.md).\n"
    )
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    report = ingest_paths(settings, [root])
    assert report.new == 2, report.failed
    return settings_env(settings)


COMMANDS = [
    ["docs", "list"],
    ["docs", "show", "evil.md"],
    ["docs", "graph", "evil.md"],
    ["docs", "graph", "evil.md", "--format", "dot"],
    ["search", "vacuum", "--mode", "keyword"],
    ["stats"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_human_output_never_carries_control_sequences(
    evil_kb: dict[str, str], args: list[str]
) -> None:
    result = CliRunner().invoke(cli, args, env=evil_kb)
    assert result.exit_code == 0, result.output
    assert _leaks(result.output) == [], repr(result.output)
    if args[0] in ("docs", "search") and "dot" not in args:
        # the newline inside the file name is shown escaped, on the file's own line
        assert "evil\\nname.md" in result.output, result.output


JSON_COMMANDS = [
    ["docs", "list", "--json"],
    ["docs", "show", "evil.md", "--json"],
    ["docs", "graph", "evil.md", "--format", "json"],
    ["search", "vacuum", "--mode", "keyword", "--json"],
]


@pytest.mark.parametrize("args", JSON_COMMANDS, ids=" ".join)
def test_json_output_escapes_controls_and_keeps_the_values(
    evil_kb: dict[str, str], args: list[str]
) -> None:
    result = CliRunner().invoke(cli, args, env=evil_kb)
    assert result.exit_code == 0, result.output
    assert _leaks(result.output) == [], repr(result.output)
    assert EVIL_TITLE in _strings(json.loads(result.output))  # escaped, not lost


def _strings(data: Any) -> set[str]:
    if isinstance(data, str):
        return {data}
    if isinstance(data, dict):
        data = list(data.values())
    if isinstance(data, list):
        return set().union(*(_strings(item) for item in data)) if data else set()
    return set()
