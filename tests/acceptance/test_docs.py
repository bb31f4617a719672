"""The documentation site builds, its reference pages hold everything they document, and no
project document carries a machine path or an issue number.

``mkdocs build --strict`` fails on a broken link, a missing snippet, a page missing from the
navigation; the reference pages are generated at build time (``docs/hooks.py``), so the checks
below read the built HTML for every setting, every command and every ``kb.`` function.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from loader.devtools.reference import MARKERS, cli_commands, sql_functions
from loader.errors import SqlState
from loader.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200


def _project_docs() -> list[Path]:
    docs = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]
    docs += [*(ROOT / "eval").rglob("README.md"), ROOT / "sql_functions" / "README.md"]
    return sorted(p for p in docs if p.is_file())


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "", "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _text(site: Path, page: str) -> str:
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_the_configuration_page_lists_every_setting(site: Path) -> None:
    text = _text(site, "reference/configuration")
    for field in dataclasses.fields(Settings):
        assert field.name in text, field.name
        assert ENV_PREFIX + field.name.upper() in text, field.name
    assert MARKERS["settings"] not in text


def test_every_setting_has_a_description() -> None:
    from loader.devtools.reference import setting_docs

    described = setting_docs()
    missing = [f.name for f in dataclasses.fields(Settings) if not described.get(f.name)]
    assert missing == [], f"write a docstring under these fields in loader/settings.py: {missing}"


def test_the_cli_page_lists_every_command(site: Path) -> None:
    text = _text(site, "reference/cli")
    commands = cli_commands()
    assert {"pgkb ingest", "pgkb db grant", "pgkb quickstart", "pgkb models activate"} <= set(
        commands
    )
    # the commands under their nouns, not their old top-level names (hidden aliases)
    assert {"pgkb db doctor", "pgkb docs stale", "pgkb models reembed"} <= set(commands)
    assert "## `pgkb doctor`" not in text and "pgkb reembed" not in commands
    for command in commands:
        assert command in text, command
    # every option of every command, by its long name
    from loader.cli.main import cli

    def options(command: click.Command) -> set[str]:
        found = {
            opt
            for param in command.params
            if isinstance(param, click.Option)
            for opt in param.opts
            if opt.startswith("--")
        }
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                found |= options(sub)
        return found

    missing = sorted(opt for opt in options(cli) if opt not in text)
    assert missing == []
    assert "--remove" in text and "--demo-url" in text


def test_the_sql_page_lists_every_function(site: Path) -> None:
    text = _text(site, "reference/sql")
    functions = sql_functions()
    files = {p.stem for p in (ROOT / "sql_functions").glob("*.sql")}
    # one function per file: every file is documented
    assert {f.file.removesuffix(".sql") for f in functions} == files
    for function in functions:
        assert f"kb.{function.name}" in text, function.name
        assert function.comment.replace("`", "")[:60] in text, function.name
    assert MARKERS["errors"] not in text
    for code in SqlState:  # the table of pgkb's error codes
        assert code.value in text and code.name.lower() in text, code


def test_snippets_include_root_files(site: Path) -> None:
    text = _text(site, "explanation/reliability")
    assert "what was tried, what happened, what was lost" in text


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_readme_keeps_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # the CI runs the second command exactly as the README shows it
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci.endswith("pytest")
    assert f"```bash\n{ci}\n```" in readme
    # the first one installs no torch: the default model runs on ONNX Runtime
    first = (
        "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e . && pgkb quickstart"
    )
    assert f"```bash\n{first}\n```" in readme


def test_the_readme_names_each_page_once_per_paragraph_and_table() -> None:
    """A merge that keeps both sides of a paragraph or a table shows as a page linked twice (a
    newcomer read "base's model, /v1/search, /v1/ask): Services and agents" twice over)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", readme, flags=re.S)
    blocks = re.split(r"\n\s*\n", prose)
    twice = []
    for block in blocks:
        targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", block)
        twice += [t for t in dict.fromkeys(targets) if targets.count(t) > 1]
    assert twice == [], f"README.md links these twice in one paragraph or table: {twice}"


MACHINE_PATH = re.compile(r"(?<![\w.])/(work|root|tmp)/")
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? \d+|(?<![\w&/])#\d+\b")


@pytest.mark.parametrize("path", _project_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_path_or_issue_number(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if MACHINE_PATH.search(line) or ISSUE_NUMBER.search(line)
    ]
    assert found == [], f"{path.relative_to(ROOT)}: " + "; ".join(found)
