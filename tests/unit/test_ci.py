""".ci/run checks what reviewers check and ends with the README's test command: lint, format
and types before the suite (each a failing step under ``set -e``), the extensions built and
required, and the last line exactly the command the README gives for the whole suite."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("Run the whole test suite", 1)[1]
    found = re.search(r"```bash\n(.+?)\n```", block, re.S)
    assert found, "the README's test command block"
    return found.group(1).strip()


def _steps() -> list[str]:
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_ci_ends_with_the_readmes_test_command() -> None:
    command = _readme_test_command()
    assert command.endswith("&& pytest")
    assert _steps()[-1] == command


def test_ci_checks_lint_format_and_types_then_builds_the_extensions_before_the_suite() -> None:
    steps = _steps()
    assert steps[0] == "set -euo pipefail"  # every step below fails the run
    order = [
        "ruff check .",
        "ruff format --check .",
        "mypy",
        "lint-imports",
        "export PGKB_REQUIRE_EXTENSIONS=all",
        "python -m tests.extensions build",
    ]
    positions = [steps.index(step) for step in order]
    assert positions == sorted(positions)
    venv = next(i for i, s in enumerate(steps) if s.startswith("python3.11 -m venv .venv"))
    assert steps.index("rm -rf .venv") < venv < positions[0]  # inside the fresh environment
    assert positions[-1] < len(steps) - 1
