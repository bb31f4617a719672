"""RELIABILITY.md cites the tests that reproduce each defect and fault: every cited test file
exists under its full path, and every cited test is defined (in the file it is cited with, when
one is named; ``::name`` continues the file cited last on the same line)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "RELIABILITY.md"

PATH_SPAN = re.compile(r"(?P<path>[\w./-]*test_\w+\.py)(?:::(?P<name>\w+))?")
CONTINUED = re.compile(r"::(?P<name>\w+)")
BARE_NAME = re.compile(r"test_\w+")


def _defined(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)\(", path.read_text(), re.M))


def citations(text: str) -> list[tuple[int, str, str | None, str | None]]:
    """(line, the cited span, its file or None, its test name or None), in reading order."""
    found: list[tuple[int, str, str | None, str | None]] = []
    for number, line in enumerate(text.splitlines(), 1):
        last: str | None = None
        for span in re.findall(r"`([^`\n]+)`", line):
            if match := PATH_SPAN.fullmatch(span):
                last = match["path"]
                found.append((number, span, last, match["name"]))
            elif match := CONTINUED.fullmatch(span):
                found.append((number, span, last, match["name"]))
            elif BARE_NAME.fullmatch(span):
                found.append((number, span, None, span))
    return found


def problems(text: str, root: Path) -> list[str]:
    everywhere: dict[str, set[str]] = {}
    for path in (root / "tests").rglob("test_*.py"):
        for name in _defined(path):
            everywhere.setdefault(name, set()).add(path.relative_to(root).as_posix())
    out = []
    for line, span, path, name in citations(text):
        where = f"line {line}: `{span}`"
        if path is not None and not (path.startswith("tests/") and (root / path).is_file()):
            out.append(f"{where}: no file {path} (cite tests by their path from the root)")
            continue
        if name is None:
            continue
        if path is None:
            if name not in everywhere:
                out.append(f"{where}: no test {name} under tests/")
        elif path not in everywhere.get(name, set()):
            out.append(f"{where}: {path} defines no {name}")
    return out


def test_every_test_reliability_md_cites_exists() -> None:
    text = DOCUMENT.read_text(encoding="utf-8")
    assert len(citations(text)) > 60  # the parser still finds the citations
    assert problems(text, ROOT) == []


def test_the_check_finds_a_renamed_file_a_missing_test_and_a_short_name(tmp_path: Path) -> None:
    (tmp_path / "tests" / "ops").mkdir(parents=True)
    (tmp_path / "tests" / "ops" / "test_models.py").write_text("def test_kept() -> None: ...\n")
    text = (
        "| 1 | `tests/ops/test_models.py::test_kept`, `::test_gone` |\n"
        "| 2 | `test_ops_models.py::test_kept` and `tests/ops/test_old.py` |\n"
        "| 3 | `test_kept` and `test_never_written` |\n"
    )
    assert problems(text, tmp_path) == [
        "line 1: `::test_gone`: tests/ops/test_models.py defines no test_gone",
        "line 2: `test_ops_models.py::test_kept`: no file test_ops_models.py (cite tests by "
        "their path from the root)",
        "line 2: `tests/ops/test_old.py`: no file tests/ops/test_old.py (cite tests by their "
        "path from the root)",
        "line 3: `test_never_written`: no test test_never_written under tests/",
    ]
