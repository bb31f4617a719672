"""Where pgkb's non-Python files are, in a source checkout and in an installed wheel.

The wheel carries ``alembic/``, ``alembic.ini``, ``sql_functions/`` and ``eval/`` inside the
package as ``loader/_bundled/...`` (see ``[tool.hatch.build.targets.wheel.force-include]``); a
source checkout (or an editable install) uses the folders at the repository root.
"""

from __future__ import annotations

import re
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


def english_words_file() -> Path:
    """Common English words, one a line (the abstention gate's vocabulary)."""
    return PACKAGE_DIR / "data" / "english_words.txt"


def sample_corpus_dir() -> Path:
    """The bundled sample corpus: 65 pages of the PostgreSQL 15 manual with its COPYRIGHT."""
    return PACKAGE_DIR / "data" / "sample"


_GRANT = re.compile(
    r"GRANT\s+EXECUTE\s+ON\s+FUNCTION\s+kb\.(\w+)\s*\([^)]*\)\s+TO\s+(kb_reader|kb_writer)",
    re.IGNORECASE,
)
_REVOKE_PUBLIC = re.compile(
    r"REVOKE\s+ALL\s+ON\s+FUNCTION\s+kb\.(\w+)\s*\([^)]*\)\s+FROM\s+PUBLIC", re.IGNORECASE
)


def function_grants() -> dict[str, list[str]]:
    """Who may call which kb function, as the files of sql_functions/ grant it (every file, so a
    new function is checked as soon as it has a file): ``reader`` the functions granted to
    kb_reader, ``writer`` those granted to kb_writer, ``restricted`` those revoked from PUBLIC and
    not granted to kb_reader (kb_reader must not call them)."""
    reader: set[str] = set()
    writer: set[str] = set()
    revoked: set[str] = set()
    for text in function_files().values():
        body = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        for name, role in _GRANT.findall(body):
            (reader if role.lower() == "kb_reader" else writer).add(name)
        revoked.update(_REVOKE_PUBLIC.findall(body))
    return {
        "reader": sorted(reader),
        "writer": sorted(writer),
        "restricted": sorted(revoked - reader),
    }
