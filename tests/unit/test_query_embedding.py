"""The query's embedding, started before the connection opens: in a forked child on Linux (the
vector comes back exactly), a thread otherwise; a failing child leaves the work, and its error,
to the caller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types
from collections.abc import Sequence
from pathlib import Path

import pytest

from loader.errors import ConfigError
from loader.providers import query_embedding
from loader.providers.query_embedding import PrefetchedQuery


class Fake:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(text)
        if self.fail:
            raise ConfigError("no model here", hint="fix it")
        return [len(text) / 7, -1 / 3, 1e-30, 0.1]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "thread"])
def test_the_prefetched_vector_is_the_embedders(
    fork: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(query_embedding, "_can_fork", lambda: fork)
    fake = Fake()
    prefetched = PrefetchedQuery(fake, "vacuum")  # type: ignore[arg-type]
    assert prefetched.embed_query("vacuum") == [6 / 7, -1 / 3, 1e-30, 0.1]  # exact floats
    # forked: the child did the work (its calls are not in this process's list)
    assert fake.calls == ([] if fork else ["vacuum"])
    assert prefetched.embed_query("other") == [5 / 7, -1 / 3, 1e-30, 0.1]  # asked again: here
    assert fake.calls[-1] == "other"


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "thread"])
def test_a_failure_is_raised_to_the_caller(fork: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_embedding, "_can_fork", lambda: fork)
    fake = Fake(fail=True)
    prefetched = PrefetchedQuery(fake, "vacuum")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no model here"):
        prefetched.embed_query("vacuum")
    assert fake.calls == ["vacuum"]  # forked: the child failed, the caller embedded (and raised)


@pytest.mark.parametrize("loaded", ["onnxruntime", "torch"])
def test_no_fork_once_a_model_library_runs_here(
    loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process with ONNX Runtime or torch loaded (a quickstart's ask after its ingest, a
    server) embeds in a thread: a forked child would inherit their thread pools without their
    threads."""
    for name in query_embedding.NATIVE_POOLS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert query_embedding._can_fork() == sys.platform.startswith("linux")
    monkeypatch.setitem(sys.modules, loaded, types.ModuleType(loaded))
    assert not query_embedding._can_fork()
    fake = Fake()
    prefetched = PrefetchedQuery(fake, "vacuum")  # type: ignore[arg-type]
    assert prefetched.embed_query("vacuum") == [6 / 7, -1 / 3, 1e-30, 0.1]
    assert fake.calls == ["vacuum"]  # embedded in this process


# Runs `pgkb search` in a fresh interpreter up to the moment its query's embedding starts, and
# writes which of the database's libraries were loaded by then.
STARTS_BEFORE_THE_DRIVER = """
import json, os, sys
from loader.providers import query_embedding

def started(self, embedder, text):
    loaded = sorted({m.split(".")[0] for m in sys.modules} & {"psycopg", "psycopg_pool"})
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({"text": text, "loaded": loaded}, out)
    raise SystemExit(0)

query_embedding.PrefetchedQuery.__init__ = started
from loader.cli import main
sys.argv = ["pgkb", "search", "vacuum", "full"]
main()
"""


def test_search_starts_its_embedding_before_loading_the_database_driver(tmp_path: Path) -> None:
    """The child that embeds the query is forked before the database driver and the search
    are imported, so the model's load and theirs overlap (on two cores, hybrid search then
    takes about what keyword search takes); forked after them, it would add its whole load."""
    out = tmp_path / "probe.json"
    env = {
        **os.environ,
        "PROBE_OUT": str(out),
        "PGKB_DATA_DIR": str(tmp_path / "data"),
        "PGKB_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none",
        "PGKB_EMBEDDING_PROVIDER": "openai",
        "PGKB_EMBEDDING_MODEL": "some-model",
        "PGKB_EMBEDDING_DIMS": "8",
        "PGKB_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1",
    }
    done = subprocess.run(
        [sys.executable, "-c", STARTS_BEFORE_THE_DRIVER],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == {"text": "vacuum full", "loaded": []}
