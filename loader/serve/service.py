"""The warm knowledge base both servers share: the application core
(:class:`loader.app.core.KnowledgeBase`) over a pool of read-only connections, with the embedding
model loaded once and taking turns (a query before the next slice of a batch,
:class:`~loader.serve.turns.ModelTurns`).

The use cases themselves (search, ask, read, neighbours, graph, catalogue) and the checks of
their requests are the core's; this module adds what only a warm process has: the pool and how
its failures read (:class:`Unavailable`: the database cannot be reached, HTTP 503; the pool
reconnects by itself when it is back; any other SQL error a
:class:`~loader.app.checks.BadRequest`), the checks at start (schema, model, collections),
``/v1/embeddings``' batches and the health check.

Collections are kept in the database itself: every pooled connection carries the served
collections (``--collection``) as its session's ``pgkb.collections``, which every kb function
applies within the role's grants; a call's own ``collections`` narrow them further for that call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from loader import telemetry
from loader.app.checks import BadRequest, collections_hint, embedding_inputs
from loader.app.core import KnowledgeBase
from loader.db import queries
from loader.db.connect import connect, database_url, privilege_error
from loader.db.migrations import check_schema
from loader.db.session import connection, read_only_configurer, scope_session
from loader.errors import (
    ConfigError,
    DatabaseError,
    ModelMismatchError,
    PgkbError,
    SqlState,
)
from loader.providers.embeddings import get_embedder
from loader.serve.turns import ModelTurns
from loader.settings import Settings

log = logging.getLogger(__name__)

EMBED_SLICE = 16
"""``/v1/embeddings`` embeds its inputs this many at a time, so a search waits at most one slice."""


class Unavailable(DatabaseError):
    """The database cannot be reached now (HTTP 503); later calls reconnect."""


class KnowledgeService(KnowledgeBase):
    """The warm process: call :meth:`open` once, then the core's use cases from any thread."""

    def __init__(
        self,
        settings: Settings,
        *,
        category: str | None = None,
        pool_size: int = 4,
        wait_timeout: float = 10.0,
    ) -> None:
        self.url = database_url(settings, read=True)  # every transaction only reads
        self.wait_timeout = wait_timeout
        self.turns = ModelTurns()
        self.pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"connect_timeout": 5, "application_name": "pgkb serve"},
            configure=read_only_configurer(settings),
            check=ConnectionPool.check_connection,
            timeout=wait_timeout,
            reconnect_timeout=24 * 3600,
            open=False,
            name="pgkb",
        )
        super().__init__(
            settings,
            embedder=get_embedder(settings),
            connections=self._pooled,
            write_connections=self._writing,
            category=category,
        )
        self.model_load_seconds: float | None = None
        """How long loading the embedding model (its first call) took at :meth:`open`."""

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> KnowledgeService:
        """Load the model, open the pool and check the schema and the model; raises a
        :class:`PgkbError` saying what to fix (the server does not start)."""
        started = time.perf_counter()
        self.embed_query("warm up")
        self.model_load_seconds = time.perf_counter() - started
        conn = connect(self.url, register=False)  # a clear error for a wrong URL or a down server
        try:
            self.schema_revision = check_schema(conn)
            row = conn.execute(queries.ACTIVE_MODEL).fetchone()
            self._check_collections(conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise privilege_error(exc, self.url) from None
        finally:
            conn.close()
        if row is not None and (row[1], row[2]) != (self.embedder.name, self.embedder.dims):
            raise ModelMismatchError(
                f"the configured embedding model {self.embedder.name} ({self.embedder.dims} dims) "
                f"is not the knowledge base's active model {row[1]} ({row[2]} dims)",
                hint=f"set PGKB_EMBEDDING_MODEL={row[1]} and PGKB_EMBEDDING_DIMS={row[2]}",
            )
        self.pool.open(wait=False)
        return self

    def close(self) -> None:
        self.pool.close()

    def _check_collections(self, conn: psycopg.Connection[Any]) -> None:
        """The served collections (``--collection``) exist and the role may read them; else a
        :class:`ConfigError` with the database's message, and the server does not start."""
        if not self.settings.collection_names():
            return
        scope_session(conn, self.settings)
        try:
            conn.execute(queries.SESSION_COLLECTION_SCOPE).fetchone()
        except psycopg.Error as exc:
            if exc.sqlstate != SqlState.COLLECTION_NOT_READABLE:
                raise
            conn.rollback()
            raise ConfigError(
                (exc.diag.message_primary or str(exc)).strip(), hint=exc.diag.message_hint
            ) from None

    def __enter__(self) -> KnowledgeService:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _pooled(self, names: Sequence[str]) -> Iterator[psycopg.Connection[Any]]:
        """A pooled read-only connection, kept to ``names`` (checked already: within the served
        collections) for the call; database failures become :class:`Unavailable`, a missing
        grant one message naming ``pgkb db grant``, any other SQL error :class:`BadRequest`."""

        asked = time.perf_counter()
        try:
            with self.pool.connection(timeout=self.wait_timeout) as conn:
                telemetry.event("pool_wait", seconds=time.perf_counter() - asked)
                if not names:
                    yield conn
                    return
                conn.execute(queries.SET_SESSION_COLLECTIONS, (",".join(names),))
                try:
                    yield conn
                finally:  # back to the served collections before the pool lends it again
                    served = ",".join(self.settings.collection_names())
                    conn.execute(queries.SET_SESSION_COLLECTIONS, (served,))
        except PoolTimeout:
            telemetry.event("pool_timeout")
            raise Unavailable(
                f"the database did not answer within {self.wait_timeout:g} s",
                hint="check that the server is running; pgkb reconnects by itself when it is back",
            ) from None
        except psycopg.OperationalError as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise Unavailable(
                f"the database connection failed: {detail}",
                hint="check that the server is running; the next call reconnects",
            ) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise privilege_error(exc, self.url) from None
        except psycopg.Error as exc:
            message = (exc.diag.message_primary or str(exc)).strip()
            hint = exc.diag.message_hint
            if exc.sqlstate == SqlState.COLLECTION_NOT_READABLE:
                hint = self._collections_hint()
            raise BadRequest(message, hint=hint) from None
        except PgkbError as exc:  # raised by the call's own code from the database's error
            if exc.sqlstate != SqlState.COLLECTION_NOT_READABLE:
                raise
            raise BadRequest(exc.message, hint=self._collections_hint()) from None

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own to the primary for one write (``/v1/documents``, the MCP
        write tools), as the server's role, in autocommit; the database not answering is
        :class:`Unavailable` (HTTP 503), like a read's."""
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(connection(self.settings))
            except psycopg.OperationalError as exc:
                detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise Unavailable(f"the database connection failed: {detail}") from None
            except DatabaseError as exc:  # cannot connect, or the schema is not usable
                raise Unavailable(exc.message, hint=exc.hint) from None
            conn.autocommit = True
            yield conn

    def _collections_hint(self) -> str:
        try:
            return collections_hint(self.collections())
        except PgkbError:
            return collections_hint([])

    # -- embeddings --------------------------------------------------------------------------

    def embed_query(self, text: str) -> list[float]:
        with self.turns.query():
            return list(self.embedder.embed_query(text))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of a question's words (the abstention gate's focus check): a query's turn."""
        with self.turns.query():
            return [list(v) for v in self.embedder.embed(list(texts))]

    def embed_inputs(
        self, texts: Sequence[str], *, query: bool = False
    ) -> tuple[list[list[float]], int]:
        """Vectors of ``texts`` with the knowledge base's model (as passages, or as queries:
        with the model's query prompt, each a query's turn), and their token count
        (``/v1/embeddings``): :data:`EMBED_SLICE` texts at a time, each slice a batch's turn."""
        embedding_inputs(texts)
        vectors: list[list[float]] = []
        if query:
            for text in texts:
                with self.turns.query():
                    vectors.append(list(self.embedder.embed_query(text)))
        else:
            for start in range(0, len(texts), EMBED_SLICE):
                with self.turns.batch():
                    part = self.embedder.embed(list(texts[start : start + EMBED_SLICE]))
                vectors += [list(v) for v in part]
        tokens = sum(self.embedder.count_tokens(t) for t in texts)
        return vectors, tokens

    def health(self) -> dict[str, Any]:
        """Database reachable (a round trip through the pool) and model loaded."""
        database = True
        detail = None
        try:
            with self.connection() as conn:
                conn.execute(queries.PING).fetchone()
        except PgkbError as exc:
            database, detail = False, exc.message
        status: dict[str, Any] = {
            "status": "ok" if database else "unavailable",
            "database": database,
            "model": self.model_name,
            "dims": self.embedder.dims,
            "model_loaded": True,
            "schema_revision": self.schema_revision,
            "category": self.category,
            "collections": list(self.settings.collection_names()),
        }
        if detail:
            status["detail"] = detail
        return status
