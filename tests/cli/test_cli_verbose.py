"""``-v`` is every command's option as well as the root's: ``pgkb ingest -v`` means what
``pgkb -v ingest`` does (per-file lines), ``-vv`` debug."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loader.cli import cli


@pytest.fixture
def root_level() -> Iterator[None]:
    """The CLI sets the root logger's level; put it back after the test."""
    level = logging.getLogger().level
    try:
        yield
    finally:
        logging.getLogger().setLevel(level)


def _commands(command: click.Command, path: str = "pgkb") -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, f"{path} {name}")


def test_every_command_accepts_verbose() -> None:
    commands = dict(_commands(cli))
    assert "pgkb ingest" in commands and "pgkb db url" in commands
    for path, command in commands.items():
        flags = [opt for param in command.params for opt in getattr(param, "opts", [])]
        assert "-v" in flags and "--verbose" in flags, f"{path} has no -v"
        assert flags.count("-v") == 1, f"{path} has -v twice"


def test_command_level_verbose_lowers_the_log_level(root_level: None) -> None:
    env = {"PGKB_DATABASE_URL": "postgresql://nobody@localhost/none"}
    logging.getLogger().setLevel(logging.WARNING)
    result = CliRunner().invoke(cli, ["db", "url", "-v"], env=env)
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.INFO
    logging.getLogger().setLevel(logging.WARNING)
    result = CliRunner().invoke(cli, ["db", "url", "-vv"], env=env)
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.DEBUG


def test_ingest_verbose_prints_each_file(
    cli_env: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture, root_level: None
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "vacuum.md").write_text("# Vacuum\n\nVACUUM reclaims storage.\n", encoding="utf-8")
    (folder / "index.md").write_text("# Index\n\nAn index speeds up reads.\n", encoding="utf-8")
    logging.getLogger().setLevel(logging.WARNING)
    quiet = CliRunner().invoke(cli, ["ingest", str(folder)], env=cli_env)
    assert quiet.exit_code == 0, quiet.output
    assert not [r for r in caplog.records if r.name.startswith("loader.ingest")]
    (folder / "vacuum.md").write_text("# Vacuum\n\nVACUUM FULL rewrites.\n", encoding="utf-8")
    loud = CliRunner().invoke(cli, ["ingest", "-v", str(folder)], env=cli_env)
    assert loud.exit_code == 0, loud.output
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("loader.ingest")]
    assert any(line.startswith("changed: ") and "vacuum.md" in line for line in lines), lines
