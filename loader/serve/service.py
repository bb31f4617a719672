"""The warm knowledge base both servers share: a pool of read-only connections, the embedding
model loaded once, and an optional category scope passed to SQL on every call.

Each method validates its arguments (bounded limits, known modes, a document named by id or
source; the checks are :mod:`loader.serve.arguments`), borrows one pooled connection, calls the
SQL functions through the same code the CLI and the reader agent use
(:func:`loader.search.search`, :func:`loader.answer.single.answer_question`,
:class:`loader.answer.tools.Toolbox`, :mod:`loader.graph.catalogue`) and returns a JSON-ready
dict. Failures are one of two :class:`~loader.errors.PgkbError` kinds the servers map to their
protocol: :class:`~loader.serve.arguments.BadRequest` (the caller can fix the arguments) and
:class:`Unavailable` (the database cannot be reached; the pool reconnects by itself when it is
back). The model runs one call at a time, a query before the next slice of a batch
(:class:`~loader.serve.turns.ModelTurns`).

The scope: with ``category`` set, every call passes it to the SQL functions as their filter
(``kb.hybrid_search``'s filters, ``kb.document_list``, ``kb.find_documents``,
``kb.explore_graph``), so a document of another category is never found, read or listed; a call
asking for another category is refused. Collections are kept in the database itself: every
pooled connection carries the served collections (``--collection``) as its session's
``pgkb.collections``, which every kb function applies within the role's grants; a call's own
``collections`` narrow them further for that call (one outside them is refused).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from loader import telemetry
from loader.answer.agent import run_agent
from loader.answer.reading import Refusal, document_infos, read_document
from loader.answer.single import answer_question
from loader.answer.tools import (
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_LIMIT,
    Toolbox,
    ToolRefusal,
    relation_type_list,
)
from loader.db import queries
from loader.db.connect import connect, database_url, privilege_error
from loader.db.migrations import check_schema
from loader.db.session import read_only_configurer, scope_session
from loader.errors import (
    ConfigError,
    DatabaseError,
    ModelMismatchError,
    PgkbError,
    SqlState,
)
from loader.graph.catalogue import (
    AmbiguousDocument,
    DocumentNotFound,
    find_document,
    list_documents,
)
from loader.providers.chat import ChatClient
from loader.providers.embeddings import get_embedder
from loader.search import MODES, search
from loader.serve.arguments import (
    LIST_LIMIT,
    MAX_LIST_LIMIT,
    MAX_NEIGHBOURS,
    MAX_READ_TOKENS,
    MAX_SEARCH_LIMIT,
    MIN_READ_TOKENS,
    READ_TOKENS,
    BadRequest,
    bounded_int,
    call_collections,
    collections_hint,
    embedding_inputs,
    text_argument,
)
from loader.serve.turns import ModelTurns
from loader.settings import Settings

log = logging.getLogger(__name__)

GRAPH_TOKENS = 6000
EMBED_SLICE = 16
"""``/v1/embeddings`` embeds its inputs this many at a time, so a search waits at most one slice."""


class Unavailable(DatabaseError):
    """The database cannot be reached now (HTTP 503); later calls reconnect."""


class KnowledgeService:
    """The warm process: call :meth:`open` once, then the methods from any thread."""

    def __init__(
        self,
        settings: Settings,
        *,
        category: str | None = None,
        pool_size: int = 4,
        wait_timeout: float = 10.0,
    ) -> None:

        self.settings = settings
        self.category = category.strip() if category and category.strip() else None
        self.url = database_url(settings, read=True)  # every transaction only reads
        self.embedder = get_embedder(settings)
        self.chat = ChatClient.from_settings(settings)
        self.agent_chat = (
            ChatClient.from_settings(settings.replace(chat_model=settings.agent_model))
            if settings.agent_chat_model and settings.agent_chat_model != settings.chat_model
            else None
        )
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
        self.schema_revision: str | None = None
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

    def _collections(self, collections: Sequence[str] | None) -> tuple[str, ...]:
        """A call's ``collections``, checked: valid names, within the served ones."""
        return call_collections(collections, self.settings.collection_names())

    @contextmanager
    def connection(
        self, collections: Sequence[str] | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled read-only connection, kept to ``collections`` (within the served ones) for
        the call; database failures become :class:`Unavailable`, a missing grant one message
        naming ``pgkb db grant``, any other SQL error :class:`BadRequest`."""

        names = self._collections(collections)
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

    def _collections_hint(self) -> str:
        try:
            return collections_hint(self.readable_collections())
        except PgkbError:
            return collections_hint([])

    def _scope(self, category: str | None) -> str | None:
        asked = category.strip() if isinstance(category, str) and category.strip() else None
        if self.category is None:
            return asked
        if asked is not None and asked != self.category:
            raise BadRequest(
                f"this server is scoped to category {self.category!r}; category {asked!r} is "
                "not available",
                hint="leave category out, or start another server for that category",
            )
        return self.category

    def _filters(self, category: str | None) -> dict[str, Any]:
        return {"category": category} if category else {}

    # -- embeddings --------------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        return self.embedder.name

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

    # -- the tools -----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        mode: str = "hybrid",
        limit: int | None = None,
        category: str | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        min_similarity: float | None = None,
        document_ids: Sequence[str] | None = None,
        collections: Sequence[str] | None = None,
        rerank: bool | None = None,
    ) -> dict[str, Any]:
        """The best chunks for ``query`` (kb.hybrid_search, kb.vector_search, kb.keyword_search);
        ``rerank`` as :func:`loader.search.search` takes it (None: when a reranker is set)."""
        text = text_argument("query", query)
        if mode not in MODES:
            raise BadRequest(f"unknown mode {mode!r}; use one of: {', '.join(MODES)}")
        count = bounded_int("limit", limit, 1, MAX_SEARCH_LIMIT, self.settings.match_count)
        scope = self._scope(category)
        filters: dict[str, Any] = {}
        if source is not None:
            filters["source"] = text_argument("source", source, 1000)
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise BadRequest('metadata must be a JSON object, e.g. {"team": "hr"}')
            filters["metadata"] = dict(metadata)
        if min_similarity is not None and not -1.0 <= float(min_similarity) <= 1.0:
            raise BadRequest(f"min_similarity must be from -1 to 1, got {min_similarity}")
        if document_ids is not None and len(document_ids) > 100:
            raise BadRequest("document_ids may name at most 100 documents")
        if rerank is not None and not isinstance(rerank, bool):
            raise BadRequest(f"rerank must be true or false, got {rerank!r}")
        settings = self.settings.replace(min_similarity=min_similarity)
        notes: list[str] = []
        embedding = None if mode == "keyword" else self.embed_query(text)
        with self.connection(collections) as conn:
            try:
                hits = search(
                    conn,
                    text,
                    embedding,
                    settings=settings,
                    mode=mode,
                    limit=count,
                    category=scope,
                    document_ids=list(document_ids) if document_ids else None,
                    filters=filters,
                    rerank=rerank,
                    notes=notes,
                )
            except ModelMismatchError:
                raise
            except PgkbError as exc:
                refused = BadRequest(exc.message, hint=exc.hint)
                refused.sqlstate = exc.sqlstate  # connection() words a collection's refusal
                raise refused from None
        result: dict[str, Any] = {
            "query": text,
            "mode": mode,
            "results": [h.to_dict() for h in hits],
        }
        if notes:
            result["notes"] = notes
        return result

    def ask(
        self,
        question: str,
        *,
        category: str | None = None,
        collections: Sequence[str] | None = None,
        agent: bool = False,
        on_text: Callable[[str], None] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """The cited answer (or "I don't know"), as ``pgkb ask --json`` prints it; without a chat
        model the answer is the cited passages.

        ``agent``: the reader agent (``pgkb ask --agent``) instead of the single-shot answer.
        ``on_text``: the answer's text as it is written, only as far as the citation check lets
        it through (:class:`loader.answer.stream.CheckedStream`); the pieces it receives add up
        to the returned ``answer`` (an answer settled without a model reply comes in one
        piece). ``progress``: a line per stage (search, each of the agent's steps)."""
        text = text_argument("question", question)
        scope = self._scope(category)
        sent: list[str] = []

        def emit(piece: str) -> None:
            sent.append(piece)
            if on_text is not None:
                on_text(piece)

        with self.connection(collections) as conn:
            if agent:
                settings = self.settings
                client = self.chat
                if self.agent_chat is not None:
                    settings, client = (
                        self.settings.replace(chat_model=self.settings.agent_model),
                        self.agent_chat,
                    )
                answer = run_agent(
                    conn, settings, text, embedder=self, client=client, category=scope,
                    progress=progress,
                )  # fmt: skip
            else:
                answer = answer_question(
                    conn, self.settings, text, embedder=self, client=self.chat, category=scope,
                    on_checked_text=emit if on_text is not None else None, progress=progress,
                )  # fmt: skip
        if on_text is not None and not sent:
            emit(answer.answer)
        return answer.to_json()

    def readable_collections(self) -> list[str]:
        """The collections this server serves and its role may read (``kb.collection_list``),
        by name."""
        with self.connection() as conn:
            rows = conn.execute(queries.COLLECTION_LIST).fetchall()
        names = [str(row[0]) for row in rows]
        served = self.settings.collection_names()
        return [n for n in names if not served or n in served]

    def _document_id(self, conn: psycopg.Connection[Any], ref: str, scope: str | None) -> str:
        try:
            ref = text_argument("document", ref, 2000)
            return find_document(conn, ref, filters=self._filters(scope))
        except DocumentNotFound as exc:  # not found: the hint names the command line's list
            hint = (
                exc.hint
                if isinstance(exc, AmbiguousDocument)
                else "list_documents gives every document's id and source_uri"
            )
            raise BadRequest(exc.message, hint=hint) from None

    def read_document(
        self,
        document: str,
        *,
        chunk_start: int | None = None,
        chunk_end: int | None = None,
        max_tokens: int | None = None,
        category: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """A document (named by id, source, or the end of its source) or a chunk range of it;
        what does not fit ``max_tokens`` comes back as its outline (kb.read_document)."""
        budget = bounded_int(
            "max_tokens", max_tokens, MIN_READ_TOKENS, MAX_READ_TOKENS, READ_TOKENS
        )
        scope = self._scope(category)
        with self.connection(collections) as conn:
            doc_id = uuid.UUID(self._document_id(conn, document, scope))
            info = document_infos(conn, [doc_id], scope).get(doc_id)
            if info is None:  # removed since find_document saw it
                raise BadRequest(
                    f"unknown document id {doc_id}; use a document_id from the catalogue or from "
                    "search results"
                )
            try:
                read = read_document(
                    conn, info, chunk_start=chunk_start, chunk_end=chunk_end, budget=budget
                )
            except Refusal as exc:
                raise BadRequest(str(exc)) from None
        return read.to_dict()

    def neighbor_chunks(
        self,
        chunk_id: int,
        *,
        before: int | None = None,
        after: int | None = None,
        category: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The chunk with up to ``before``/``after`` chunks around it in its document
        (kb.neighbor_chunks, the document checked against the scope in SQL)."""
        chunk = bounded_int("chunk_id", chunk_id, 1, 2**63 - 1, 0)
        scope = self._scope(category)
        params = {
            "chunk_id": chunk,
            "before": bounded_int("before", before, 0, MAX_NEIGHBOURS, 1),
            "after": bounded_int("after", after, 0, MAX_NEIGHBOURS, 1),
            "filters": json.dumps(self._filters(scope)),
        }
        with self.connection(collections) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(queries.NEIGHBOR_CHUNKS_IN_SCOPE, params).fetchall()
        if not rows:
            raise BadRequest(
                f"no chunk {chunk}" + (f" in category {scope!r}" if scope else ""),
                hint="use a chunk_id from search results",
            )
        first = rows[0]
        return {
            "document_id": str(first["document_id"]),
            "title": first["title"],
            "source_uri": first["source_uri"],
            "chunks": [
                {
                    "chunk_id": r["chunk_id"],
                    "chunk_index": r["chunk_index"],
                    "heading_path": r["heading_path"],
                    "content": r["content"],
                    "is_hit": r["is_hit"],
                }
                for r in rows
            ],
        }

    def explore_graph(
        self,
        *,
        document: str | None = None,
        query: str | None = None,
        depth: int | None = None,
        relation_types: Sequence[str] | None = None,
        limit: int | None = None,
        category: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Documents around a document, matching a query, or the most connected ones
        (kb.explore_graph within the scope)."""
        scope = self._scope(category)
        bounded = bounded_int("limit", limit, 1, MAX_GRAPH_LIMIT, 15)
        steps = 1 if depth is None else bounded_int("depth", depth, 1, MAX_GRAPH_DEPTH, 1)
        text = None if query is None else text_argument("query", query)
        with self.connection(collections) as conn:
            start = None
            if document is not None:
                start = uuid.UUID(self._document_id(conn, document, scope))
            # only a depth that was given is noted: a default would read as "ignored"
            ignored = depth is not None and start is None
            tools = Toolbox(conn, self.settings, self, category=scope)
            try:
                return tools.explore_documents(
                    start=start,
                    query=text,
                    depth=steps,
                    relation_types=relation_type_list(relation_types and list(relation_types)),
                    limit=bounded,
                    budget=GRAPH_TOKENS,
                    notes=["depth applies only with document_id; ignored"] if ignored else [],
                )
            except ToolRefusal as exc:
                raise BadRequest(str(exc)) from None

    def list_documents(
        self,
        *,
        limit: int | None = None,
        category: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The catalogue: each document's id, title, source, type, summary, key entities and
        counts (kb.document_list within the scope), by title."""
        count = bounded_int("limit", limit, 1, MAX_LIST_LIMIT, LIST_LIMIT)
        scope = self._scope(category)
        with self.connection(collections) as conn:
            rows = list_documents(conn, scope, count + 1)
        documents = [
            {**{k: v for k, v in row.items() if k != "id"}, "document_id": row["id"],
             "key_entities": list(row["key_entities"] or []),
             "updated_at": str(row["updated_at"])}
            for row in rows[:count]
        ]  # fmt: skip
        return {"documents": documents, "count": len(documents), "truncated": len(rows) > count}

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
