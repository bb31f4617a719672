"""The benchmark suite's smoke runs: a small knowledge base (pages of the bundled sample,
embedded by the fake OpenAI-compatible server) as the material, corpora of 1,000 chunks built
from it on the test server, and the environment every scenario (and every ``pgkb`` process it
starts) reads its embedding model from."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.settings import Settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import create_database, drop_database

MODEL, DIMS = "bench-fake-embedder", 32
PAGES = 12  # of the bundled sample: about 500 chunks with the fake model's token estimate


@pytest.fixture(scope="package", autouse=True)
def mcp_stdio_imported_outside_capfd() -> None:
    """The MCP SDK's stdio client binds ``sys.stderr`` as its ``errlog`` default when it is
    first imported. The serve and commands smoke runs import it lazily, under ``capfd``, whose
    stream is closed after the test: every later MCP test of the session (tests/serve) then
    failed to start its server ("I/O operation on closed file"). Imported here first."""
    import mcp.client.stdio  # noqa: F401


@pytest.fixture(scope="package")
def embeddings() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(dims=DIMS).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def pages(tmp_path_factory: Any) -> Path:
    from loader.resources import sample_corpus_dir

    folder = tmp_path_factory.mktemp("pages")
    for page in sorted(sample_corpus_dir().glob("*.html"))[:PAGES]:
        shutil.copy(page, folder)
    return folder


@pytest.fixture(scope="package")
def source(
    pg_url: str, template_db: str, embeddings: FakeOpenAI, pages: Path, tmp_path_factory: Any
) -> Iterator[str]:
    """A knowledge base of ``pages``, ingested with the fake model: the material."""
    from loader.ingest.pipeline import ingest_paths

    url = create_database(pg_url, "pgkb_bench_smoke_source", template=template_db)
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("source-data"),
        embedding_provider="openai",
        embedding_model=MODEL,
        embedding_dims=DIMS,
        embedding_base_url=embeddings.base_url,
    )
    try:
        assert ingest_paths(settings, [pages]).exit_code == 0
        yield url
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            names = conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'pgkb\\_bench\\_%'"
            ).fetchall()
        for (name,) in names:
            drop_database(pg_url, name)


@pytest.fixture(scope="package")
def corpus_1000(pg_url: str, source: str) -> dict[str, Any]:
    """The build figures of the 1,000-chunk corpus of ``source``, built once; the scenarios
    that ask for that size find it kept."""
    import argparse

    from bench import corpus

    args = argparse.Namespace(rebuild=True, maintenance_work_mem="64MB")
    url, figures = corpus.corpus(pg_url, 1000, corpus.read_material(source), args)
    return {"url": url, **figures}


@pytest.fixture
def bench_env(
    monkeypatch: pytest.MonkeyPatch, embeddings: FakeOpenAI, tmp_path: Path
) -> dict[str, str]:
    """The fake model for the scenarios and their ``pgkb`` processes; results in tmp_path."""
    env = {
        "PGKB_EMBEDDING_PROVIDER": "openai",
        "PGKB_EMBEDDING_MODEL": MODEL,
        "PGKB_EMBEDDING_DIMS": str(DIMS),
        "PGKB_EMBEDDING_BASE_URL": embeddings.base_url,
        "PGKB_DATA_DIR": str(tmp_path / "data"),
        "PGKB_BENCH_RESULTS": str(tmp_path / "results"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
