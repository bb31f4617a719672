"""The machinery that builds the suite's extensions (tests/extensions.py): the build is skipped
while the installed stamp matches the source, redone when the source changes, a failed build
leaves no stamp and is reported with its last lines, ``python -m tests.extensions build`` exits 1
on one, and a test that cannot have a required extension fails instead of skipping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import extensions
from tests.extensions import BuildFailed, Extension, ensure_built, installed_is_current

ROOT = Path(__file__).resolve().parents[2]
EXT = Extension("fake_ext", "tools/build-fake-ext.sh")


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A shared folder with a fake extension whose build script counts its runs and installs a
    library and a control file where the fake pg_config says, as the real script does."""
    shared = tmp_path / "shared"
    source = shared / "vendor" / "fake_ext"
    (source / "src").mkdir(parents=True)
    (source / "fake_ext.control").write_text("default_version = '1.0'\n")
    (source / "src" / "fake.c").write_text("int fake(void) { return 1; }\n")
    (source / "COMMIT").write_text("0123456789abcdef0123456789abcdef01234567\n")
    (shared / "tools").mkdir()
    (shared / "tools" / "build-fake-ext.sh").write_text(
        "set -euo pipefail\n"
        'src="$(dirname "$0")/../vendor/fake_ext"\n'
        'if grep -q "syntax error" "$src/src/fake.c"; then\n'
        '    echo "fake.c:1: error: boom" >&2; exit 2\n'
        "fi\n"
        'echo run >> "$(dirname "$0")/runs"\n'
        'cp "$src/src/fake.c" "$("$PG_CONFIG" --pkglibdir)/fake_ext.so"\n'
        'cp "$src/fake_ext.control" "$("$PG_CONFIG" --sharedir)/extension/"\n'
    )
    return shared


@pytest.fixture
def pg_config(tmp_path: Path) -> Path:
    install = tmp_path / "pginstall"
    (install / "lib").mkdir(parents=True)
    (install / "share" / "extension").mkdir(parents=True)
    (install / "bin").mkdir()
    config = install / "bin" / "pg_config"
    config.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --pkglibdir) echo {install / "lib"};; --sharedir) echo {install / "share"};;'
        " *) exit 1;; esac\n"
    )
    config.chmod(0o755)
    return config


def _runs(shared: Path) -> int:
    runs = shared / "tools" / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_the_build_runs_once_per_source_and_again_when_it_changes(
    shared: Path, pg_config: Path
) -> None:
    assert not installed_is_current(EXT, shared, pg_config)
    assert "fake_ext 0123456789ab built and installed" in ensure_built(EXT, shared, pg_config)
    assert _runs(shared) == 1
    stamp = pg_config.parent.parent / "lib" / "fake_ext.pgkb-build.json"
    assert '"commit": "0123456789abcdef0123456789abcdef01234567"' in stamp.read_text()
    assert "build skipped" in ensure_built(EXT, shared, pg_config)
    assert _runs(shared) == 1
    # a changed source file (same commit named): built again
    (shared / "vendor" / "fake_ext" / "src" / "fake.c").write_text("int fake(void) { return 2; }\n")
    assert not installed_is_current(EXT, shared, pg_config)
    ensure_built(EXT, shared, pg_config)
    assert _runs(shared) == 2
    # the library gone from the installation (a reinstalled wheel): built again
    (pg_config.parent.parent / "lib" / "fake_ext.so").unlink()
    ensure_built(EXT, shared, pg_config)
    assert _runs(shared) == 3


def test_a_failed_build_says_why_and_leaves_no_stamp(shared: Path, pg_config: Path) -> None:
    ensure_built(EXT, shared, pg_config)
    (shared / "vendor" / "fake_ext" / "src" / "fake.c").write_text("syntax error\n")
    with pytest.raises(BuildFailed, match=r"did not build \(exit 2\): fake.c:1: error: boom"):
        ensure_built(EXT, shared, pg_config)
    assert not (pg_config.parent.parent / "lib" / "fake_ext.pgkb-build.json").exists()
    assert not installed_is_current(EXT, shared, pg_config)
    with pytest.raises(BuildFailed, match="pg_config"):
        ensure_built(EXT, shared, pg_config.parent / "no-such-pg_config")
    (shared / "tools" / "build-fake-ext.sh").unlink()
    with pytest.raises(BuildFailed, match=r"build script .* is missing"):
        ensure_built(EXT, shared, pg_config)


def test_the_ci_build_step_exits_1_when_a_build_fails(
    shared: Path, pg_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What .ci/run runs before the suite (set -e: its exit 1 ends the run)."""
    monkeypatch.setitem(extensions.EXTENSIONS, "fake_ext", EXT)
    monkeypatch.setenv(extensions.SHARED_VARIABLE, str(shared))
    assert extensions.main(["build", "fake_ext", "--pg-config", str(pg_config)]) == 0
    (shared / "vendor" / "fake_ext" / "src" / "fake.c").write_text("syntax error\n")
    assert extensions.main(["build", "fake_ext", "--pg-config", str(pg_config)]) == 1
    # the real entry point, as .ci/run calls it: a shared folder without pg_textsearch fails
    result = subprocess.run(
        [sys.executable, "-m", "tests.extensions", "build", "--pg-config", str(pg_config)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", extensions.SHARED_VARIABLE: str(shared)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result
    assert "pg_textsearch's source is not in" in result.stderr


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"CI": "false"}, False),
        ({"PGKB_REQUIRE_EXTENSIONS": "all"}, True),
        ({"PGKB_REQUIRE_EXTENSIONS": "citus, pg_textsearch"}, True),
        ({"PGKB_REQUIRE_EXTENSIONS": "citus"}, False),
    ],
)
def test_a_missing_extension_skips_locally_and_fails_where_required(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], required: bool
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv(extensions.REQUIRE_VARIABLE, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert extensions.required("pg_textsearch") is required
    outcome = pytest.fail.Exception if required else pytest.skip.Exception
    with pytest.raises(outcome, match="pg_textsearch did not build"):
        extensions.skip_or_fail("pg_textsearch", "pg_textsearch did not build")
