"""Where pgkb's non-Python files are, in a source checkout and in an installed wheel.

The wheel carries ``alembic/``, ``alembic.ini``, ``sql_functions/`` and ``eval/`` inside the
package as ``loader/_bundled/...`` (see ``[tool.hatch.build.targets.wheel.force-include]``); a
source checkout (or an editable install) uses the folders at the repository root.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_BUNDLED = PACKAGE_DIR / "_bundled"
_REPO_ROOT = PACKAGE_DIR.parent


def _locate(name: str) -> Path:
    bundled = _BUNDLED / name
    if bundled.exists():
        return bundled
    return _REPO_ROOT / name


def alembic_dir() -> Path:
    return _locate("alembic")


def alembic_ini() -> Path:
    return _locate("alembic.ini")


def sql_functions_dir() -> Path:
    return _locate("sql_functions")


def function_files(directory: Path | None = None) -> dict[str, str]:
    """``{name: text}`` for each ``sql_functions/<name>.sql``."""
    directory = directory or sql_functions_dir()
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.sql"))}


def eval_dir() -> Path:
    """``eval/``: the question sets and the recorded baseline."""
    return _locate("eval")


def sample_corpus_dir() -> Path:
    """The bundled sample corpus: 65 pages of the PostgreSQL 15 manual with its COPYRIGHT."""
    return PACKAGE_DIR / "data" / "sample"
