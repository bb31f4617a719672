"""pgkb works outside a checkout: its wheel, installed into a fresh virtual environment and run
from another folder, finds its migrations, SQL functions, question sets and sample as package
data, reports its package's version, and runs ``pgkb quickstart`` to the end (the whole bundled
sample ingested, one question answered and one "I don't know").

The fresh environment gets the wheel alone (``--no-deps``); the libraries it needs come from the
test environment's site-packages through a ``.pth`` line, which adds that folder without running
its own ``.pth`` files, so the checkout's editable install is not seen there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        args, capture_output=True, text=True, timeout=900, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding pgkb's wheel: its bin folder."""
    work = tmp_path_factory.mktemp("wheel")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(ROOT)]
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = work.glob("pgkb-*.whl")
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    unpacked = _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
         "--target", str(site), str(wheel)]
    )  # fmt: skip
    assert unpacked.returncode == 0, unpacked.stdout + unpacked.stderr
    # the libraries pgkb needs, after the wheel's own folder (so its `loader` comes first)
    (site / "zz_test_libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = env_dir / "bin" / "pgkb"
    script.write_text(f"#!{python}\nfrom loader.cli import main\nmain()\n")
    script.chmod(0o755)
    return env_dir / "bin"


def test_the_wheel_finds_its_files_as_package_data(installed: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.metadata, loader, loader.resources as r\n"
        "print(loader.__file__)\n"
        "for f in (r.alembic_dir, r.alembic_ini, r.sql_functions_dir, r.eval_dir,"
        " r.sample_corpus_dir): print(f())\n"
        "print(importlib.metadata.version('pgkb'))\n"
    )
    run = _run([str(installed / "python"), "-c", code], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split()
    where = installed.parent
    for line in lines[:-1]:
        assert Path(line).is_relative_to(where), line  # none of them in the checkout
        assert Path(line).exists(), line
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert lines[-1] == version
    shown = _run([str(installed / "pgkb"), "--version"], cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.strip() == f"pgkb, version {version}"


def test_the_installed_wheel_runs_the_quickstart(
    installed: Path, db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    from loader.resources import sample_corpus_dir

    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        **settings_env(ingest_settings(db_url, tmp_path, fake_openai, chunk_tokens=200)),
        # the fake server's embeddings are hash noise: the keyword leg finds the page
        "PGKB_VECTOR_WEIGHT": "0.5",
    }
    pgkb = str(installed / "pgkb")
    try:
        run = _run([pgkb, "quickstart"], env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        pages = len(list(sample_corpus_dir().glob("*.html")))
        assert f"{pages} files: {pages} new" in run.stderr
        asked = run.stdout.split("$ pgkb ask ")[1:]
        assert len(asked) == 2 and "I don't know" not in asked[0], run.stdout
        assert "I don't know" in asked[1]
        # the sample was read from the installed package, not from the checkout
        assert str(installed.parent) in asked[0] and str(ROOT) not in run.stdout
    finally:
        removed = _run([pgkb, "quickstart", "--remove"], env=env, cwd=tmp_path)
    assert removed.returncode == 0, removed.stdout + removed.stderr
