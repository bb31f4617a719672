"""Helpers the tests share (plain functions and data; the fixtures are in ``conftest.py``).

Databases: ``with_dbname``, ``create_database``, ``drop_database``, ``migrate``. Corpora: the
hand-made 4-dimensional corpus of the answer and agent tests (``load_corpus``, ``HandEmbedder``,
``chat_settings``) and the golden 3-dimensional corpus of the search tests (``load_golden``).
Ingestion: ``ingest_settings`` and ``settings_env`` (its PGKB_* environment; fake embeddings
API), ``write_docs`` (a small folder of every format), ``stored_documents``, ``check_whole``
(every document complete). Queries: ``rows`` (dicts by column name). SQL function files:
``function_file_problems`` (the rules of ``sql_functions/`` and the function store). Errors:
``raises_code`` (a database error checked by its SQLSTATE). Servers: ``uvicorn_thread`` (an ASGI
app on uvicorn as ``pgkb serve`` configures it, in a thread of the test).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from pgvector import Vector
from psycopg import sql

from loader.errors import SqlState
from loader.settings import Settings, load_settings
from tests.pdfs import text_pdf

if TYPE_CHECKING:  # the fake server is a pytest plugin (conftest), imported by pytest first
    from tests.fake_openai import FakeOpenAI

# --- databases ------------------------------------------------------------------------------


def with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def admin_connection(pg_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(pg_url, autocommit=True)


def create_database(pg_url: str, name: str, template: str | None = None) -> str:
    with admin_connection(pg_url) as conn:
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query = query + sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(query)
    return with_dbname(pg_url, name)


def drop_database(pg_url: str, name: str) -> None:
    with admin_connection(pg_url) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def migrate(url: str, revision: str = "head") -> None:
    """alembic upgrade through an injected SQLAlchemy connection, as pgkb's env.py allows."""
    import sqlalchemy as sa

    from loader.db.connect import sqlalchemy_url
    from loader.db.migrations import upgrade_connection

    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            upgrade_connection(connection, revision)
            connection.commit()
    finally:
        engine.dispose()


# --- the pg_textsearch keyword backend ------------------------------------------------------


def skip_without_extension(pg_url: str, name: str) -> None:
    """Skip the test, with the reason, when the test server cannot run extension ``name`` (its
    source is not here to build it, the build failed, or the server was not started with it);
    fail it instead where extensions are required (``CI=true``, ``PGKB_REQUIRE_EXTENSIONS``: see
    :mod:`tests.extensions`)."""
    from tests import extensions

    reason = extensions.unavailable_reason(name)
    if reason is None and extensions.EXTENSIONS[name].preload:
        with psycopg.connect(pg_url) as admin:
            row = admin.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
        loaded = {lib.strip().strip('"') for lib in (row[0] if row else "").split(",")}
        if name not in loaded:
            reason = f"the test server does not load {name} (shared_preload_libraries)"
    if reason is not None:
        extensions.skip_or_fail(name, reason)


def skip_without_pg_textsearch(pg_url: str) -> None:
    """:func:`skip_without_extension` for the pg_textsearch keyword backend."""
    skip_without_extension(pg_url, "pg_textsearch")


def use_pg_textsearch(conn: psycopg.Connection[Any]) -> None:
    """Give the database the pg_textsearch keyword backend, as ``pgkb db upgrade`` does (the
    extension, then each collection's bm25 index); commits."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
    conn.execute("SELECT kb.build_keyword_indexes()")
    conn.commit()


# --- the hand-made corpus of the answer and agent tests --------------------------------------

MODEL = "hand-made-4d"


@dataclasses.dataclass(frozen=True)
class Doc:
    title: str
    source_uri: str
    category: str
    chunks: list[tuple[str, str, list[float]]]
    """(heading_path, content, vector) per chunk, in order."""


LONG_CHUNKS = [
    (
        f"Checkpoint Tuning > Part {i // 10 + 1}",
        f"Checkpoint section {i}: the checkpointer flushes dirty buffers to disk so that WAL "
        f"before the checkpoint can be recycled. Paragraph {i} discusses checkpoint_timeout and "
        f"max_wal_size, and how spreading writes with checkpoint_completion_target avoids I/O "
        f"spikes. Detail number {i} of the long manual.",
        [0.0, 0.0, 1.0, 0.01 * i],
    )
    for i in range(30)
]

CORPUS = [
    Doc(
        "Index Types",
        "/kb/indexes-types.md",
        "manual",
        [
            (
                "Indexes > Index Types",
                "PostgreSQL provides several index types: B-tree, Hash, GiST, SP-GiST, GIN and "
                "BRIN. Each index type uses a different algorithm suited to different queries.",
                [1.0, 0.0, 0.0, 0.0],
            ),
            (
                "Indexes > Index Types > B-tree",
                "B-tree is the default index type: CREATE INDEX creates a B-tree index unless "
                "USING names another method.",
                [0.9, 0.1, 0.0, 0.0],
            ),
            (
                "Indexes > Index Types > GIN",
                "GIN indexes suit composite values such as arrays and jsonb documents.",
                [0.8, 0.0, 0.2, 0.0],
            ),
        ],
    ),
    Doc(
        "VACUUM",
        "/kb/sql-vacuum.md",
        "manual",
        [
            (
                "VACUUM",
                "VACUUM reclaims storage occupied by dead tuples left behind by updates and "
                "deletes.",
                [0.0, 1.0, 0.0, 0.0],
            ),
            (
                "VACUUM > FULL",
                "VACUUM FULL rewrites the whole table into a new file and needs an exclusive "
                "lock on it while it runs.",
                [0.0, 0.9, 0.1, 0.0],
            ),
        ],
    ),
    Doc("Checkpoint Tuning", "/kb/checkpoint-tuning.md", "guide", LONG_CHUNKS),
]


class HandEmbedder:
    """Maps a question onto the corpus's hand-made directions by the words it contains."""

    AXES: Sequence[tuple[str, ...]] = (
        ("index", "b-tree", "btree", "gin"),
        ("vacuum", "dead", "reclaim"),
        ("checkpoint", "wal"),
    )

    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        lowered = text.lower()
        vector = [0.0, 0.0, 0.0, 0.05]
        for axis, words in enumerate(self.AXES):
            if any(w in lowered for w in words):
                vector[axis] = 1.0
        return vector


def load_chunks(conn: psycopg.Connection[Any], chunks: Sequence[tuple[str, str, str]]) -> list[int]:
    """Insert ``(source_uri, heading, content)`` chunks (documents made on first use, in the
    default collection), commit, and return the chunk ids in order: a corpus for tests of the
    abstention signals, which need text and term statistics but no vectors."""
    ids = []
    for i, (uri, heading, content) in enumerate(chunks):
        doc = conn.execute(
            "INSERT INTO kb.documents (source_uri, title, content_sha) VALUES (%s, %s, 'x') "
            "ON CONFLICT (collection, source_uri) DO UPDATE SET title = excluded.title "
            "RETURNING id",
            (uri, uri),
        ).fetchone()
        assert doc is not None
        row = conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha,"
            " token_count) VALUES (%s, %s, %s, %s, 'x', 10) RETURNING id",
            (doc[0], i, heading, content),
        ).fetchone()
        assert row is not None
        ids.append(int(row[0]))
    conn.commit()
    return ids


def load_corpus(conn: psycopg.Connection[Any], docs: Sequence[Doc] = CORPUS) -> dict[str, str]:
    """Write ``docs`` into the kb tables; returns {title: document id}."""
    conn.execute("SELECT kb.register_model(%s, 4, 'test')", (MODEL,))
    ids: dict[str, str] = {}
    for doc in docs:
        doc_id = str(uuid.uuid4())
        ids[doc.title] = doc_id
        text = "\n".join(c for _h, c, _v in doc.chunks)
        conn.execute(
            "INSERT INTO kb.documents (id, source_uri, title, content_sha, category) "
            "VALUES (%s, %s, %s, %s, %s)",
            (
                doc_id,
                doc.source_uri,
                doc.title,
                hashlib.sha256(text.encode()).hexdigest(),
                doc.category,
            ),
        )
        for index, (heading, content, vector) in enumerate(doc.chunks):
            row = conn.execute(
                "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, "
                "content_sha, token_count) VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    doc_id,
                    index,
                    heading,
                    content,
                    hashlib.sha256(content.encode()).hexdigest(),
                    len(content.split()) * 4 // 3,
                ),
            ).fetchone()
            assert row is not None
            conn.execute(
                "INSERT INTO kb.embeddings (chunk_id, model_id, embedding) "
                "SELECT %s, id, %s::vector FROM kb.embedding_models WHERE name = %s",
                (row[0], str(vector), MODEL),
            )
    conn.commit()
    return ids


def chat_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    """The test database, the hand-made model, and the fake server as the chat model."""
    return settings.replace(
        embedding_model=MODEL,
        embedding_dims=4,
        chat_base_url=fake_openai.base_url,
        chat_model="fake-chat",
        chat_api_key="sk-test",
        chat_max_retries=0,
        chat_timeout=5.0,
    )


# --- the golden corpus of the search tests ----------------------------------------------------

D1 = uuid.UUID("00000000-0000-0000-0000-0000000000d1")
D2 = uuid.UUID("00000000-0000-0000-0000-0000000000d2")
D3 = uuid.UUID("00000000-0000-0000-0000-0000000000d3")

# (document, chunk_index, heading_path, content, token_count, embedding)
CHUNKS = [
    (
        D1,
        0,
        "Errors > Class 40",
        "SQLSTATE 40P01 means deadlock_detected: two transactions wait on each other",
        20,
        [1.0, 0.0, 0.0],
    ),
    (
        D1,
        1,
        "Errors > Class 40",
        "serialization_failure 40001: retry the transaction",
        12,
        [0.8, 0.6, 0.0],
    ),
    (
        D2,
        0,
        "Resource Consumption > Memory",
        "maintenance_work_mem sets the memory used by "
        "maintenance operations such as VACUUM and CREATE INDEX",
        25,
        [0.0, 1.0, 0.0],
    ),
    (
        D2,
        1,
        "Resource Consumption > Memory",
        "work_mem sets the memory used by sort operations "
        "and hash tables before writing to temporary files",
        24,
        [0.0, 0.6, 0.8],
    ),
    (
        D3,
        0,
        "Routine Vacuuming",
        "VACUUM reclaims storage occupied by dead tuples; run vacuum regularly",
        15,
        [0.0, 0.0, 1.0],
    ),
]
DOCS = [
    (D1, "errcodes.html", "Error Codes", "reference", '{"team": "db", "version": 15}'),
    (
        D2,
        "runtime-config-resource.html",
        "Resource Consumption",
        "configuration",
        '{"team": "ops", "version": 15}',
    ),
    (D3, "routine-vacuuming.html", "Routine Vacuuming", "maintenance", '{"team": "ops"}'),
]


@dataclass
class Corpus:
    ids: list[int]  # chunk ids in CHUNKS order
    model_id: int


def load_golden(conn: psycopg.Connection[Any]) -> Corpus:
    model_id = conn.execute("SELECT kb.register_model('golden', 3, 'test')").fetchone()[0]
    for doc_id, uri, title, category, metadata in DOCS:
        conn.execute(
            "INSERT INTO kb.documents (id, source_uri, title, content_sha, category, metadata) "
            "VALUES (%s, %s, %s, 'sha', %s, %s::jsonb)",
            (doc_id, uri, title, category, metadata),
        )
    ids = []
    for doc_id, index, heading, content, tokens, vector in CHUNKS:
        chunk_id = conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
            "token_count) VALUES (%s, %s, %s, %s, 'sha', %s) RETURNING id",
            (doc_id, index, heading, content, tokens),
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO kb.embeddings (chunk_id, model_id, embedding) VALUES (%s, %s, %s)",
            (chunk_id, model_id, Vector(vector)),
        )
        ids.append(chunk_id)
    conn.commit()
    return Corpus(ids, model_id)


# --- ingestion through the fake embeddings server -------------------------------------------

PARAGRAPHS = [
    "Vacuum reclaims storage occupied by dead tuples and keeps statistics current.",
    "Autovacuum runs in the background and triggers on thresholds per table.",
    "Freezing old transaction ids prevents wraparound failures in busy clusters.",
]


def ingest_settings(db_url: str, tmp_path: Path, fake: FakeOpenAI, **more: Any) -> Settings:
    """Settings for ingesting through the fake embeddings server: 40-token chunks, no retries."""
    values: dict[str, Any] = {
        "database_url": db_url,
        "data_dir": str(tmp_path / "data"),
        "embedding_provider": "openai",
        "embedding_model": "fake-embed",
        "embedding_dims": fake.dims,
        "embedding_base_url": fake.base_url,
        "embedding_max_retries": 0,
        "chunk_tokens": 40,
        "chunk_overlap": 0,
    }
    values.update(more)
    return load_settings(env={}, **values)


def settings_env(settings: Settings) -> dict[str, str]:
    return {
        "PGKB_DATABASE_URL": str(settings.database_url),
        "PGKB_DATA_DIR": str(settings.data_dir),
        "PGKB_EMBEDDING_PROVIDER": settings.embedding_provider,
        "PGKB_EMBEDDING_MODEL": settings.embedding_model,
        "PGKB_EMBEDDING_DIMS": str(settings.embedding_dims),
        "PGKB_EMBEDDING_BASE_URL": str(settings.embedding_base_url),
        "PGKB_EMBEDDING_MAX_RETRIES": str(settings.embedding_max_retries),
        "PGKB_CHUNK_TOKENS": str(settings.chunk_tokens or ""),  # "": unset, model-driven
        "PGKB_CHUNK_OVERLAP": str(settings.chunk_overlap),
    }


def stored_documents(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, str]]:
    rows = conn.execute("SELECT source_uri, title, content_sha FROM kb.documents").fetchall()
    conn.rollback()
    return {Path(uri).name: (title, sha) for uri, title, sha in rows}


def check_whole(conn: psycopg.Connection[Any]) -> None:
    """Every document has chunks 0..n-1, each with exactly one embedding of the active model."""
    rows = conn.execute(
        """
        SELECT d.source_uri, count(c.id), coalesce(max(c.chunk_index), -1),
               count(e.chunk_id)
          FROM kb.documents d
          LEFT JOIN kb.chunks c ON c.document_id = d.id
          LEFT JOIN kb.embeddings e
                 ON e.chunk_id = c.id AND e.model_id = (SELECT id FROM kb.active_model())
         GROUP BY d.source_uri
        """
    ).fetchall()
    conn.rollback()
    for uri, chunks, last_index, embeddings in rows:
        assert chunks > 0, uri
        assert last_index == chunks - 1, uri
        assert embeddings == chunks, uri


# --- queries ------------------------------------------------------------------------------------


def rows(conn: psycopg.Connection[Any], query: str, params: Any = ()) -> list[dict[str, Any]]:
    cur = conn.execute(query, params)
    names = [c.name for c in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def write_docs(root: Path) -> None:
    """A small folder of every format: guides/vacuum.md, guides/wal.md, notes.txt, page.html,
    guide.pdf, and image.png (unsupported: skipped quietly)."""
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "vacuum.md").write_text("# Vacuum\n\n" + "\n\n".join(PARAGRAPHS) + "\n")
    (root / "guides" / "wal.md").write_text(
        "# WAL\n\n## Archiving\n\nArchive WAL segments to durable storage.\n"
    )
    (root / "notes.txt").write_text("Plain notes about checkpoints and their spacing.\n")
    (root / "page.html").write_text(
        "<html><head><title>Locks</title></head><body><nav>Prev Next</nav>"
        "<h1>Locks</h1><p>Row locks block writers, never readers.</p></body></html>"
    )
    (root / "guide.pdf").write_bytes(
        text_pdf([["Backups should be tested by restoring them."]], title="Backup Guide")
    )
    (root / "image.png").write_bytes(b"\x89PNG not ingested")  # unsupported: skipped quietly


# --- SQL function files ---------------------------------------------------------------------


def function_file_problems(name: str, text: str) -> list[str]:
    """What breaks the rules every function file follows (``sql_functions/<name>.sql`` and each
    file of the function store): a header comment naming ``kb.<name>``, one
    ``CREATE OR REPLACE FUNCTION kb.<name>(``, a pinned ``search_path``, a ``COMMENT ON
    FUNCTION``, and clean text (no tab, carriage return or trailing space; one final newline).
    PostgreSQL itself checks the rest: ``tests/sql/test_function_store.py`` validates every file
    with ``check_function_bodies = on`` at its revision."""
    problems: list[str] = []
    if not text.startswith(f"-- kb.{name}("):
        problems.append(f"does not start with the header comment `-- kb.{name}(...`")
    creates = re.findall(r"CREATE OR REPLACE FUNCTION kb\.(\w+)\(", text)
    if creates != [name]:
        problems.append(f"must create kb.{name} and nothing else, creates {creates}")
    if not re.search(rf"COMMENT ON FUNCTION kb\.{name}\(", text):
        problems.append(f"lacks COMMENT ON FUNCTION kb.{name}(...)")
    if not re.search(r"^SET search_path = ", text, re.M):
        problems.append("does not pin its search_path (`SET search_path = ...`)")
    for char, what in (("\t", "a tab"), ("\r", "a carriage return")):
        if char in text:
            problems.append(f"holds {what}")
    if re.search(r"[ \t]\n", text):
        problems.append("has trailing spaces")
    if not text.endswith("\n") or text.endswith("\n\n"):
        problems.append("must end with exactly one newline")
    return problems


# --- errors -----------------------------------------------------------------------------------


@contextlib.contextmanager
def raises_code(
    code: SqlState | str, match: str | None = None
) -> Iterator[pytest.ExceptionInfo[psycopg.Error]]:
    """Like ``pytest.raises(psycopg.Error, match=...)``, and the error's SQLSTATE is ``code``."""
    with pytest.raises(psycopg.Error, match=match) as caught:
        yield caught
    assert caught.value.sqlstate == code, (
        f"SQLSTATE {caught.value.sqlstate}, expected {code}: {caught.value}"
    )


# --- servers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def uvicorn_thread(app: Any, **config: Any) -> Iterator[int]:
    """``app`` served by uvicorn on an ephemeral 127.0.0.1 port, in a thread, with the
    configuration ``pgkb serve`` runs (``server_config``; ``config`` overrides); yields the
    port and stops the server (graceful shutdown) when the block ends."""
    import uvicorn

    from loader.serve.guard import server_config

    config.setdefault("log_level", "warning")
    instance = uvicorn.Server(server_config(app, host="127.0.0.1", port=0, **config))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield instance.servers[0].sockets[0].getsockname()[1]
    finally:
        instance.should_exit = True
        thread.join(timeout=30)
