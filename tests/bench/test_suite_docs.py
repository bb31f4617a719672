"""The suite stays small and its pages short, and every ``python -m bench`` command the
documentation shows is one the suite accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bench.__main__ import SCENARIOS, parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "measurements").glob("*.md"))
COMMAND = re.compile(r"python -m bench [a-z](?:[^`\n\\]|\\\n)+")


def documented_commands() -> list[tuple[str, str]]:
    found = []
    for path in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]:
        text = path.read_text(encoding="utf-8")
        for match in COMMAND.finditer(text):
            command = match.group(0).split("#")[0].replace("\\\n", " ").strip()
            found.append((str(path.relative_to(ROOT)), command))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_measurement_page_is_at_most_150_lines(page: Path) -> None:
    assert len(page.read_text(encoding="utf-8").splitlines()) <= 150


def test_the_suite_is_under_2000_lines() -> None:
    files = [p for p in (ROOT / "bench").rglob("*") if p.is_file() and "results" not in p.parts]
    assert sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files) < 2000


def test_every_page_is_listed_in_the_index() -> None:
    index = (ROOT / "docs" / "measurements" / "index.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert page.name == "index.md" or f"]({page.name})" in index, page.name


def test_every_documented_command_parses() -> None:
    commands = documented_commands()
    assert {c.split()[3] for _, c in commands} == set(SCENARIOS)  # each scenario is shown
    for where, command in commands:
        argv = shlex.split(command)[3:]
        try:
            parser().parse_args(argv)
        except SystemExit as stop:  # --help exits with 0
            if stop.code:
                pytest.fail(f"{where}: `{command}` is not a command of the suite")
