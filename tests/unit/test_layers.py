"""The layer order is a contract (``[tool.importlinter]`` in pyproject.toml): the package keeps
it, and an upward import, or an adapter reaching past the application core, breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with pyproject.toml's contracts on the ``loader`` package under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
         "lint_imports_command()", "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_package_keeps_its_layers() -> None:
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("loader/ingest/runs.py", "from loader.answer import agent", "loader.ingest"),
        ("loader/web/render.py", "from loader.ops import stats", "loader.web"),
        ("loader/db/status.py", "from loader.search import search", "loader.db"),
    ],
)
def test_an_upward_import_breaks_the_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    copy = tmp_path / "loader"
    shutil.copytree(ROOT / "loader", copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    path = tmp_path / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    run = _lint(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "BROKEN" in run.stdout and broken in run.stdout, run.stdout
