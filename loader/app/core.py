"""The application core: one entry per use case, each taking one checked request
(:mod:`loader.app.requests`) and returning one typed result (:mod:`loader.app.results`).

``pgkb search`` and ``pgkb ask``, ``pgkb serve`` (its JSON API, chat completions and web pages),
``pgkb mcp``, the LangChain and LlamaIndex retrievers and a user's own Python all call these
methods; each of them only parses its own input into a request and renders the result. A call
goes from here to the SQL functions through :func:`loader.search.search`,
:func:`loader.answer.single.answer_question` / :func:`loader.answer.agent.run_agent`,
:func:`loader.answer.reading.read_document`, :class:`loader.answer.tools.Toolbox` and
:mod:`loader.graph.catalogue`.

Where the connections come from is the caller's choice (:data:`Connections`): a server lends
pooled ones (:class:`loader.serve.service.KnowledgeService`), the command line and the
frameworks open one per call (:func:`direct_connections`). Either way each is read-only and kept
to the served collections (``--collection``), narrowed further by a call's ``collections``.

The served scope: with ``category`` set (``pgkb serve --category``), every call passes it to SQL
as its filter, so a document of another category is never found, read or listed; a call asking
for another category is refused.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import psycopg
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb

from loader.answer.agent import run_agent
from loader.answer.reading import Refusal, document_infos, read_document
from loader.answer.result import Answer
from loader.answer.single import answer_question
from loader.answer.tools import Toolbox, ToolRefusal
from loader.app.checks import BadRequest, Forbidden, NotFound, call_collections
from loader.app.requests import (
    AskRequest,
    DocumentsRequest,
    GraphRequest,
    JobsRequest,
    NeighboursRequest,
    ReadRequest,
    RemoveRequest,
    Scope,
    SearchRequest,
    SubmitRequest,
    single_category,
)
from loader.app.results import (
    Catalogue,
    DocumentRead,
    GraphResult,
    Neighbour,
    Neighbours,
    SearchResult,
)
from loader.db import queries
from loader.db.queries import JobState, QueueState
from loader.db.session import connection, reader_connection
from loader.errors import ModelMismatchError, PgkbError, SqlState, database_error
from loader.filters import SearchFilters
from loader.graph.catalogue import (
    AmbiguousDocument,
    DocumentNotFound,
    find_document,
    list_documents,
)
from loader.providers.chat import ChatClient
from loader.providers.embeddings import get_embedder
from loader.safety import one_line
from loader.search import search
from loader.settings import Settings

GRAPH_TOKENS = 6000
"""The token budget of a graph walk's answer."""

Connections = Callable[[Sequence[str]], AbstractContextManager[psycopg.Connection[Any]]]
"""``connections(collections)``: a read-only connection kept to ``collections`` (within the
served ones; empty: all of them) for one call."""

WriteConnections = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
"""``write_connections()``: a connection to the primary as the role whose writing grants apply
(the submit functions check them against its login role), in autocommit: each call's statement
is its own transaction."""


class QueryEmbedder(Protocol):
    def embed_query(self, text: str) -> Sequence[float]: ...


def direct_write_connections(settings: Settings) -> WriteConnections:
    """A connection of its own to the primary for each write."""

    @contextmanager
    def connect() -> Iterator[psycopg.Connection[Any]]:
        with connection(settings) as conn:
            conn.autocommit = True
            yield conn

    return connect


def direct_connections(settings: Settings) -> Connections:
    """A connection of its own for each call (:func:`loader.db.session.reader_connection`):
    the command line's and the frameworks' way (no pool to keep)."""

    @contextmanager
    def connect(collections: Sequence[str]) -> Iterator[psycopg.Connection[Any]]:
        with reader_connection(settings, collections=collections or None) as conn:
            yield conn

    return connect


class KnowledgeBase:
    """The use cases over one knowledge base: :meth:`search`, :meth:`ask`, :meth:`read`,
    :meth:`neighbours`, :meth:`explore`, :meth:`documents`.

    ``settings`` is the process's configuration (database, models, ranking knobs), read once;
    everything a call chooses is in its request. ``embedder`` embeds queries (None: the
    configured model, loaded on the first call that needs it); ``chat`` is the chat model (None:
    the configured one, or none); ``connections`` where each call's connection comes from (None:
    one of its own per call); ``category`` the served scope (``pgkb serve --category``).

    From Python::

        from loader.app import KnowledgeBase, SearchRequest
        kb = KnowledgeBase(load_settings())
        for hit in kb.search(SearchRequest.of("how do I rotate keys", limit=3)).hits: ...
    """

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: QueryEmbedder | None = None,
        chat: ChatClient | None = None,
        connections: Connections | None = None,
        write_connections: WriteConnections | None = None,
        category: str | None = None,
    ) -> None:
        self.settings = settings
        self._embedder = embedder
        self.chat = chat if chat is not None else ChatClient.from_settings(settings)
        self.agent_settings = settings
        self.agent_chat = self.chat
        if settings.agent_chat_model and settings.agent_chat_model != settings.chat_model:
            self.agent_settings = settings.replace(chat_model=settings.agent_model)
            self.agent_chat = ChatClient.from_settings(self.agent_settings)
        self.connections = connections or direct_connections(settings)
        self.write_connections = write_connections or direct_write_connections(settings)
        self.category = category.strip() if category and category.strip() else None
        self.schema_revision: str | None = None
        """The schema's revision, when a server checked it at start."""

    # -- the model --------------------------------------------------------------------------

    @property
    def embedder(self) -> Any:
        """The query embedder (the configured model, loaded on first use)."""
        if self._embedder is None:
            self._embedder = get_embedder(self.settings)
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: Any) -> None:
        self._embedder = embedder

    @property
    def model_name(self) -> str:
        return str(self.embedder.name)

    def embed_query(self, text: str) -> list[float]:
        return list(self.embedder.embed_query(text))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of a question's words (the abstention gate's focus check)."""
        return [list(v) for v in self.embedder.embed(list(texts))]

    # -- the scope --------------------------------------------------------------------------

    def connection(
        self, collections: Sequence[str] | None = None
    ) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A read-only connection for one call, kept to ``collections`` (within the served
        ones: :class:`BadRequest` for another)."""
        return self.connections(call_collections(collections, self.settings.collection_names()))

    def scoped(self, filters: SearchFilters) -> SearchFilters:
        """``filters`` within the served category: refused when they ask for another one."""
        if self.category is None:
            return filters
        others = [c for c in filters.category if c != self.category]
        if others:
            raise BadRequest(
                f"this server is scoped to category {self.category!r}; category "
                f"{others[0]!r} is not available",
                hint="leave category out, or start another server for that category",
            )
        return SearchFilters.of(category=self.category).merged(filters)

    def _category(self, scope: Scope) -> str | None:
        filters = self.scoped(scope.filters)
        return filters.category[0] if filters.category else None

    # -- search and ask ---------------------------------------------------------------------

    def search(self, request: SearchRequest) -> SearchResult:
        """The best chunks for the request's query (kb.hybrid_search, kb.vector_search,
        kb.keyword_search), with notes on what could not apply."""
        options = request.options
        filters = self.scoped(options.filters)
        notes: list[str] = []
        embedding = None if options.mode == "keyword" else self.embed_query(request.query)
        with self.connection(options.filters.collections) as conn:
            try:
                hits = search(
                    conn,
                    request.query,
                    embedding,
                    settings=self.settings,
                    mode=options.mode,
                    limit=options.limit,
                    filters=filters,
                    document_ids=list(options.document_ids) or None,
                    rerank=options.rerank,
                    min_similarity=options.min_similarity,
                    notes=notes,
                )
            except ModelMismatchError:
                raise
            except BadRequest:
                raise
            except PgkbError as exc:
                refused = BadRequest(exc.message, hint=exc.hint)
                refused.sqlstate = exc.sqlstate  # a collection's refusal keeps its code
                raise refused from None
            if '"' in request.query:
                notes += quoted_notes(conn, request.query, options.mode, hits)
        return SearchResult(request.query, options.mode, tuple(hits), tuple(notes))

    def ask(
        self,
        request: AskRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_checked_text: Callable[[str], None] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> Answer:
        """The cited answer (or "I don't know"); without a chat model, the cited passages.

        ``on_text``: the model's reply as it is written (before its citations are checked);
        ``on_checked_text``: the answer's text only as far as the citation check lets it through
        (the pieces add up to the returned answer; one settled without a model reply comes in
        one piece); ``progress``: a line per stage (the search, each of the agent's steps)."""
        filters = self.scoped(request.filters)
        category = single_category(filters)
        sent: list[str] = []

        def checked(piece: str) -> None:
            sent.append(piece)
            if on_checked_text is not None:
                on_checked_text(piece)

        embedder = self if callable(getattr(self.embedder, "embed", None)) else self.embedder
        with self.connection(request.filters.collections) as conn:
            if request.agent:
                answer = run_agent(
                    conn, self.agent_settings, request.question, embedder=embedder,
                    client=self.agent_chat, category=category, filters=filters,
                    progress=progress,
                )  # fmt: skip
            else:
                answer = answer_question(
                    conn, self.settings, request.question, embedder=embedder, client=self.chat,
                    category=category, filters=filters, on_text=on_text,
                    on_checked_text=checked if on_checked_text is not None else None,
                    progress=progress,
                )  # fmt: skip
        if on_checked_text is not None and not sent:
            checked(answer.answer)
        return answer

    # -- reading ----------------------------------------------------------------------------

    def _document_id(self, conn: psycopg.Connection[Any], ref: str, category: str | None) -> str:
        try:
            return find_document(conn, ref, filters={"category": category} if category else {})
        except DocumentNotFound as exc:
            hint = (
                exc.hint
                if isinstance(exc, AmbiguousDocument)
                else "list_documents gives every document's id and source_uri"
            )
            raise BadRequest(exc.message, hint=hint) from None

    def read(self, request: ReadRequest) -> DocumentRead:
        """A document or a chunk range of it; what does not fit the budget comes back as its
        outline (kb.read_document)."""
        category = self._category(request.scope)
        with self.connection(request.scope.collections) as conn:
            doc_id = uuid.UUID(self._document_id(conn, request.document, category))
            info = document_infos(conn, [doc_id], category).get(doc_id)
            if info is None:  # removed since find_document saw it
                raise BadRequest(
                    f"unknown document id {doc_id}; use a document_id from the catalogue or from "
                    "search results"
                )
            try:
                return read_document(
                    conn,
                    info,
                    chunk_start=request.chunk_start,
                    chunk_end=request.chunk_end,
                    budget=request.max_tokens,
                )
            except Refusal as exc:
                raise BadRequest(str(exc)) from None

    def neighbours(self, request: NeighboursRequest) -> Neighbours:
        """The chunk with the chunks around it in its document (kb.neighbor_chunks, the
        document checked against the scope in SQL)."""
        category = self._category(request.scope)
        params = {
            "chunk_id": request.chunk_id,
            "before": request.before,
            "after": request.after,
            "filters": json.dumps({"category": category} if category else {}),
        }
        with (
            self.connection(request.scope.collections) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            rows = cur.execute(queries.NEIGHBOR_CHUNKS_IN_SCOPE, params).fetchall()
        if not rows:
            raise BadRequest(
                f"no chunk {request.chunk_id}" + (f" in category {category!r}" if category else ""),
                hint="use a chunk_id from search results",
            )
        first = rows[0]
        return Neighbours(
            document_id=str(first["document_id"]),
            title=first["title"],
            source_uri=first["source_uri"],
            chunks=tuple(
                Neighbour(
                    r["chunk_id"], r["chunk_index"], r["heading_path"], r["content"], r["is_hit"]
                )
                for r in rows
            ),
        )

    def explore(self, request: GraphRequest) -> GraphResult:
        """Documents around a document, matching a query, or the most connected ones
        (kb.explore_graph within the scope)."""
        category = self._category(request.scope)
        with self.connection(request.scope.collections) as conn:
            start = None
            if request.document is not None:
                start = uuid.UUID(self._document_id(conn, request.document, category))
            # only a depth that was given is noted: a default would read as "ignored"
            ignored = request.depth is not None and start is None
            tools = Toolbox(conn, self.settings, self, category=category)
            try:
                return GraphResult(
                    tools.explore_documents(
                        start=start,
                        query=request.query,
                        depth=request.depth or 1,
                        relation_types=list(request.relation_types or ()) or None,
                        limit=request.limit,
                        budget=GRAPH_TOKENS,
                        notes=["depth applies only with document_id; ignored"] if ignored else [],
                    )
                )
            except ToolRefusal as exc:
                raise BadRequest(str(exc)) from None

    def documents(self, request: DocumentsRequest) -> Catalogue:
        """The catalogue: each document's id, title, source, type, summary, key entities and
        counts (kb.document_list within the scope), by title."""
        category = self._category(request.scope)
        with self.connection(request.scope.collections) as conn:
            rows = list_documents(conn, category, request.limit + 1)
        documents = tuple(
            {**{k: v for k, v in row.items() if k != "id"}, "document_id": row["id"],
             "key_entities": list(row["key_entities"] or []),
             "updated_at": str(row["updated_at"])}
            for row in rows[: request.limit]
        )  # fmt: skip
        return Catalogue(documents, truncated=len(rows) > request.limit)

    # -- writing -----------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> JobState:
        """Add or replace a document (kb.submit_document or kb.submit_file): pending until a
        worker processes it; the same document submitted again is the same job."""
        if self.category is not None and request.category not in (None, self.category):
            raise BadRequest(f"this server is scoped to category {self.category!r}")
        params: dict[str, Any] = {
            "source_uri": request.source_uri, "title": request.title,
            "metadata": Jsonb(dict(request.metadata)),
            "category": request.category or self.category, "collection": request.collection,
        }  # fmt: skip
        if request.data is not None:
            statement = queries.SUBMIT_FILE
            params.update(data=bytes(request.data), mime_type=request.mime_type)
        else:
            statement = queries.SUBMIT_DOCUMENT
            params.update(content=request.content)
        return self._write(statement, params)

    def remove(self, request: RemoveRequest) -> JobState:
        """Remove a document (kb.remove_document): pending until a worker does it."""
        params: dict[str, Any] = {
            "source_uri": request.source_uri,
            "collection": request.collection,
        }
        return self._write(queries.REMOVE_DOCUMENT, params)

    def _write(self, statement: str, params: dict[str, Any]) -> JobState:
        try:
            with self.write_connections() as conn:
                row = conn.execute(statement, params).fetchone()
                assert row is not None
                job = self._job(conn, str(row[0]))
        except psycopg.Error as exc:
            error = database_error(exc)
            if error is None:
                raise
            kind: type[PgkbError] = BadRequest
            if error.sqlstate == SqlState.COLLECTION_NOT_WRITABLE:
                kind = Forbidden
            elif error.sqlstate == SqlState.NOT_FOUND:
                kind = NotFound
            refused = kind(error.message, hint=error.hint)
            refused.sqlstate = error.sqlstate
            raise refused from None
        return job

    def _job(self, conn: psycopg.Connection[Any], job_id: str) -> JobState:
        with conn.cursor(row_factory=class_row(JobState)) as cur:
            row = cur.execute(
                queries.DOCUMENT_JOBS, {"state": None, "limit": 1, "job_id": job_id}
            ).fetchone()
        if row is None:
            raise NotFound(f"no submitted document {job_id}", hint="GET /v1/documents lists them")
        return row

    def jobs(self, request: JobsRequest) -> tuple[JobState, ...]:
        """The submitted documents the caller may read, newest first (kb.document_jobs)."""
        with self.connection() as conn, conn.cursor(row_factory=class_row(JobState)) as cur:
            rows = cur.execute(
                queries.DOCUMENT_JOBS,
                {"state": request.state, "limit": request.limit, "job_id": request.job_id},
            ).fetchall()
        if request.job_id is not None and not rows:
            raise NotFound(f"no submitted document {request.job_id}")
        return tuple(rows)

    def queue(self) -> QueueState:
        """The write queue as the caller may see it (its collections, the newest 1,000 jobs):
        jobs pending, processing and failed, and the age of the oldest pending one."""
        with self.connection() as conn:
            row = conn.execute(queries.QUEUE_STATE).fetchone()
        assert row is not None
        pending, processing, failed, oldest = row
        return QueueState(
            int(pending), int(processing), int(failed), None if oldest is None else float(oldest)
        )

    def collections(self) -> list[str]:
        """The collections served (``--collection``) that the role may read, by name; on a
        server of one category, only those holding documents of it."""
        with self.connection() as conn:
            rows = conn.execute(queries.COLLECTION_LIST).fetchall()
            names = [str(row[0]) for row in rows]
            if self.category is not None:
                row = conn.execute(
                    queries.WEB_STATS, {"filters": json.dumps({"category": self.category})}
                ).fetchone()
                held = {c["collection"] for c in ((row[0] if row else None) or {}).get(
                    "collections") or []}  # fmt: skip
                names = [n for n in names if n in held]
        served = self.settings.collection_names()
        return [n for n in names if not served or n in served]


def quoted_notes(
    conn: psycopg.Connection[Any], text: str, mode: str, hits: Sequence[Any]
) -> list[str]:
    """Why quoted parts of ``text`` were not matched exactly: a part of stop words alone cannot
    be (the index does not keep them); and when no chunk holds the quoted parts, say so (in
    hybrid mode the results are then the vector search's alone, found by meaning)."""
    parts = conn.execute(queries.QUOTED_PARTS, (text,)).fetchall()
    notes = [
        f"{_quote(part)} has only stop words or punctuation, which the full-text index does not "
        "keep: it cannot be matched exactly and was left out of the search"
        for part, indexed in parts
        if not indexed
    ]
    exact = [_quote(part) for part, indexed in parts if indexed]
    if exact and mode != "vector" and not any(h.keyword_rank is not None for h in hits):
        held = f"no chunk holds {' and '.join(exact)} as written (quoted text is matched exactly)"
        if mode == "keyword":
            notes.append(held + "; drop the quotes to find chunks with some of its words")
        else:
            notes.append(held + "; the results were found by meaning (vector search) alone")
    return notes


def _quote(part: str) -> str:
    return '"' + one_line(part) + '"'
