"""``pgkb mcp``: the knowledge base as Model Context Protocol tools (the official ``mcp`` SDK).

Six tools (eight with ``--allow-writes``: ``add_document`` and ``remove_document``, writing
through the write queue into the named collections only, each document's metadata saying
``"origin": "mcp"``) over one warm :class:`~loader.serve.service.KnowledgeService`:
``search``, ``ask``, ``read_document``, ``neighbor_chunks``, ``explore_graph``,
``list_documents``. Each has typed
arguments (the SDK turns them into the input schema and validates every call against it) and a
typed result (its output schema); results carry titles, ``source_uri``s, document and chunk ids,
so the calling agent can cite. A bad argument, a refused scope or an unreachable database is a
tool error (``isError``) with a message the agent can act on, never a crash of the server: a
value of the wrong type or out of range is named with what was expected (``limit: Input should
be less than or equal to 50 (got 500)``), an argument the tool does not take is refused with the
ones it does, and hints name the tools (``list_documents``), not the command line.
Tools are synchronous and run on the SDK's worker threads, so two clients (over HTTP) or two
calls in flight share the pool; ``ask`` runs on a worker thread of its own and reports its
stages (the search, the model call, each of the reader agent's steps) as MCP progress
notifications when the client sent a progress token. Over HTTP, ``GET /metrics`` serves the
tool calls' counts and latencies in Prometheus' text format (:mod:`loader.serve.metrics`).

Over stdio, every line the SDK cannot read (invalid JSON, a ``params`` that is not an object, a
lone surrogate, a batch) is answered with a JSON-RPC error (``-32700`` parse error, ``-32600``
invalid request, ``-32602`` invalid params) carrying the line's id when it has one, instead of
being dropped while the client waits (:func:`refusal`).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import logging
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from loader.app import (
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_LIMIT,
    MAX_LIST_LIMIT,
    MAX_NEIGHBOURS,
    MAX_READ_TOKENS,
    MAX_SEARCH_LIMIT,
    MIN_READ_TOKENS,
    RELATION_TYPES,
    AskRequest,
    DocumentsRequest,
    GraphRequest,
    NeighboursRequest,
    ReadRequest,
    RemoveRequest,
    SearchRequest,
    SubmitRequest,
    surrogate_path,
)
from loader.errors import PgkbError
from loader.serve.guard import LOCAL_NAMES, Limits, error, guarded, host_name, serve_forever
from loader.serve.mcp_results import (
    AskResult,
    Catalogue,
    GraphResult,
    JobResult,
    NeighborsResult,
    ReadResult,
    SearchResult,
)
from loader.serve.metrics import Metrics, serving
from loader.serve.service import KnowledgeService

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "pgkb: a knowledge base of documents. Start with list_documents to see what it holds, then "
    "search (or ask) and cite results by their title and source_uri. Use read_document to read "
    "a document or a chunk range, neighbor_chunks for the text around a search hit, and "
    "explore_graph for documents related to one another."
)


# --- the server -------------------------------------------------------------------------------

Category = Annotated[
    str | None,
    Field(
        description="Only documents of this category. A server started with --category allows "
        "only its own."
    ),
]
Collections = Annotated[
    list[str] | None,
    Field(
        description="Only these collections (knowledge bases); default: every one this server "
        "may read.",
        max_length=100,
    ),
]

WriteCollection = Annotated[
    str | None,
    Field(
        description="The collection to write into, one of those this server writes (the tool's "
        "description names them); default: its only one, when it writes one."
    ),
]


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a service call; its refusals and failures become the tool's error message."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return fn(*args, **kwargs)
    except PgkbError as exc:
        raise ToolError(str(exc)) from None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def validation_text(exc: ValidationError) -> str:
    """pydantic's errors as one line an agent can act on: ``limit: Input should be less than or
    equal to 50 (got 500)``, no error codes, no documentation URL."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "the value"
        if err["type"] == "missing":
            parts.append(f"{where}: required")
        else:
            parts.append(f"{where}: {err['msg']} (got {_shown(err.get('input'))})")
    return "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")


class _Observed:
    """Count one tool call in ``metrics`` (when there are metrics): its route is
    ``tool:<name>``, its mode the search mode or how the answer was settled, its status 200,
    or 400 for a tool error."""

    def __init__(self, metrics: Metrics | None, tool: str) -> None:
        self.metrics, self.tool, self.mode = metrics, tool, "-"

    def __enter__(self) -> _Observed:
        self.started = time.perf_counter()
        self.token = serving.set(self.metrics)
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        serving.reset(self.token)
        if self.metrics is not None:
            status = 200 if kind is None else 400
            self.metrics.observe(
                f"tool:{self.tool}", self.mode, status, time.perf_counter() - self.started
            )


ORIGIN = "mcp"
"""What a document written through ``pgkb mcp`` carries in its metadata as ``origin``."""


def build_server(
    service: KnowledgeService,
    metrics: Metrics | None = None,
    *,
    writable: tuple[str, ...] = (),
) -> MCPServer[Any]:
    """The MCP server with pgkb's six tools bound to ``service`` (tool calls counted in
    ``metrics`` when given); with ``writable`` collections (``--allow-writes``), also
    ``add_document`` and ``remove_document``, which write into those only."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    accepted: dict[str, tuple[str, ...]] = {}
    """Each tool's argument names (its function's parameters)."""

    class Server(MCPServer[Any]):
        """Refuses arguments a tool does not take (the SDK would drop them silently, and the
        agent believe they applied) and words argument errors for the agent."""

        async def call_tool(
            self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
        ) -> Any:
            names = accepted.get(name)
            if names is not None:
                unknown = sorted(set(arguments) - set(names))
                if unknown:
                    raise ToolError(
                        f"unknown argument(s): {', '.join(unknown)}; accepted: {', '.join(names)}"
                    )
            try:
                result = await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError) and type(exc) is ToolError:
                    raise ToolError(f"{name}: {validation_text(cause)}") from cause
                raise
            return result

    scope = f" Scoped to category {service.category!r}." if service.category else ""
    served = service.settings.collection_names()
    if served:
        scope += f" Serves the collections {', '.join(served)}."
    server = Server(name="pgkb", instructions=INSTRUCTIONS + scope)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def tool(fn: Any, annotations: ToolAnnotations = read_only) -> Any:
        accepted[fn.__name__] = tuple(
            name for name in inspect.signature(fn).parameters if name != "ctx"
        )  # the request's context is the SDK's, never an argument
        return server.tool(annotations=annotations)(fn)

    def call(tool: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with _Observed(metrics, tool):
            return _call(fn, *args, **kwargs)

    @tool
    def search(
        query: Annotated[str, Field(description="What to look for, in words or a question.")],
        mode: Annotated[
            Literal["hybrid", "vector", "keyword"],
            Field(description="hybrid (meaning + keywords, best), vector, or keyword."),
        ] = "hybrid",
        limit: Annotated[
            int,
            Field(ge=1, le=MAX_SEARCH_LIMIT, description="How many chunks to return (1 to 50)."),
        ] = 5,
        category: Category = None,
        collections: Collections = None,
        source: Annotated[
            str | None, Field(description="LIKE pattern on source_uri, e.g. '%/sql-%'.")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Documents whose metadata contains this.")
        ] = None,
        min_similarity: Annotated[
            float | None,
            Field(
                ge=-1,
                le=1,
                description="Leave out chunks whose cosine similarity to the query is lower "
                "(-1 to 1; e.g. 0.3).",
            ),
        ] = None,
        document_ids: Annotated[
            list[str] | None, Field(description="Search only these documents.", max_length=100)
        ] = None,
    ) -> SearchResult:
        """Search the knowledge base: the best chunks for the query, each with its document's
        title and source_uri (cite them), the chunk id and the chunk's text."""
        with _Observed(metrics, "search") as observed:
            observed.mode = mode
            data = _call(
                lambda: service.search(
                    SearchRequest.of(
                        query,
                        mode=mode,
                        limit=limit,
                        category=category,
                        source=source,
                        metadata=metadata,
                        min_similarity=min_similarity,
                        document_ids=document_ids,
                        collections=collections,
                    )
                ).to_dict()
            )
        return SearchResult.model_validate(data)

    async def ask(
        question: Annotated[str, Field(description="The question, in natural language.")],
        ctx: Any,
        category: Category = None,
        collections: Collections = None,
        agent: Annotated[
            bool,
            Field(
                description="Use the reader agent: it searches, reads documents and follows "
                "the graph for at most a few steps (slower; for questions that need more than "
                "five passages)."
            ),
        ] = False,
    ) -> AskResult:
        """Answer a question from the knowledge base with citations, or say it does not know
        (abstained). Without a chat model configured, the answer is the best passages, cited.
        Reports progress (the search, the model call, the agent's steps) when asked for."""
        done = 0

        def progress(message: str) -> None:
            nonlocal done
            done += 1
            try:
                anyio.from_thread.run(ctx.report_progress, done, None, message)
            except Exception:  # a client that went away must not fail the answer
                log.debug("progress notification not sent", exc_info=True)

        def work() -> dict[str, Any]:
            return _call(  # type: ignore[no-any-return]
                lambda: service.ask(
                    AskRequest.of(
                        question, category=category, collections=collections, agent=agent
                    ),
                    progress=progress,
                ).to_json()
            )

        with _Observed(metrics, "ask") as observed:
            data = await anyio.to_thread.run_sync(work)
            observed.mode = data["mode"]
        return AskResult.model_validate(data)

    ask.__annotations__["ctx"] = Context  # the SDK injects the request's context by this type
    tool(ask)

    @tool
    def read_document(
        document: Annotated[
            str,
            Field(
                description="The document: its id, its source_uri, or the end of its source_uri "
                "(e.g. 'sql-createindex.html')."
            ),
        ],
        chunk_start: Annotated[
            int | None,
            Field(ge=0, description="First chunk to read (chunk_index, from 0); default: 0."),
        ] = None,
        chunk_end: Annotated[
            int | None,
            Field(ge=0, description="Last chunk to read (inclusive); default: the last one."),
        ] = None,
        max_tokens: Annotated[
            int,
            Field(
                ge=MIN_READ_TOKENS,
                le=MAX_READ_TOKENS,
                description="Most text to return, in tokens (200 to 20000); past it, the "
                "outline comes back instead.",
            ),
        ] = 4000,
        category: Category = None,
        collections: Collections = None,
    ) -> ReadResult:
        """Read a document's chunks in order: all of it, or chunks chunk_start..chunk_end
        (inclusive, from 0). When that exceeds max_tokens, returns the document's outline
        (sections with their chunk ranges) instead: then read a smaller range."""
        data = call(
            "read_document",
            lambda: service.read(
                ReadRequest.of(
                    document,
                    chunk_start=chunk_start,
                    chunk_end=chunk_end,
                    max_tokens=max_tokens,
                    category=category,
                    collections=collections,
                )
            ).to_dict(),
        )
        return ReadResult.model_validate(data)

    @tool
    def neighbor_chunks(
        chunk_id: Annotated[int, Field(ge=1, description="A chunk_id from search results.")],
        before: Annotated[
            int,
            Field(ge=0, le=MAX_NEIGHBOURS, description="Chunks before the hit (0 to 10)."),
        ] = 1,
        after: Annotated[
            int,
            Field(ge=0, le=MAX_NEIGHBOURS, description="Chunks after the hit (0 to 10)."),
        ] = 1,
        category: Category = None,
        collections: Collections = None,
    ) -> NeighborsResult:
        """The text around a search hit: the chunk with up to `before` chunks preceding it and
        `after` following it in its document, in order."""
        data = call(
            "neighbor_chunks",
            lambda: service.neighbours(
                NeighboursRequest.of(
                    chunk_id, before=before, after=after, category=category,
                    collections=collections,
                )
            ).to_dict(),
        )  # fmt: skip
        return NeighborsResult.model_validate(data)

    @tool
    def explore_graph(
        document: Annotated[
            str | None, Field(description="Start from this document (id or source_uri).")
        ] = None,
        query: Annotated[str | None, Field(description="Documents matching these words.")] = None,
        depth: Annotated[
            int | None,
            Field(
                ge=1,
                le=MAX_GRAPH_DEPTH,
                description="Hops to walk from document (1 to 3; default 1). Only with document.",
            ),
        ] = None,
        relation_types: Annotated[
            list[str] | None,
            Field(
                description="Follow only these relation types: " + ", ".join(RELATION_TYPES) + "."
            ),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_GRAPH_LIMIT, description="Most documents to return (1 to 25).")
        ] = 15,
        category: Category = None,
        collections: Collections = None,
    ) -> GraphResult:
        """Walk the document graph (links, mentions, typed relations). With document: the
        documents up to depth hops from it, each with its distance and path. With query: the
        documents matching it and their neighbours. With neither: the most connected
        documents. Each comes with its id, title, source_uri, type, summary and entities."""
        data = call(
            "explore_graph",
            lambda: service.explore(
                GraphRequest.of(
                    document=document, query=query, depth=depth,
                    relation_types=relation_types, limit=limit, category=category,
                    collections=collections,
                )
            ).to_dict(),
        )  # fmt: skip
        return GraphResult.model_validate(data)

    @tool
    def list_documents(
        limit: Annotated[
            int,
            Field(ge=1, le=MAX_LIST_LIMIT, description="Most documents to list (1 to 1000)."),
        ] = 200,
        category: Category = None,
        collections: Collections = None,
    ) -> Catalogue:
        """The catalogue of the knowledge base: every document's id, title, source_uri, type,
        summary, key entities and chunk count, by title. Load it at the start of a session to
        know what the knowledge base holds."""
        return Catalogue.model_validate(
            call(
                "list_documents",
                lambda: service.documents(
                    DocumentsRequest.of(limit=limit, category=category, collections=collections)
                ).to_dict(),
            )
        )

    if writable:
        _write_tools(service, writable, tool, call)
    return server


def _write_tools(
    service: KnowledgeService,
    writable: tuple[str, ...],
    tool: Callable[..., Any],
    call: Callable[..., Any],
) -> None:
    """``add_document`` and ``remove_document``, writing into ``writable`` only (the database's
    grants of the server's role apply on top)."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    names = ", ".join(writable)

    def target(collection: str | None) -> str:
        if collection is None:
            if len(writable) == 1:
                return writable[0]
            raise ToolError(f"collection: required; this server writes into {names}")
        if collection not in writable:
            raise ToolError(
                f"this server may not write into collection {collection!r}; it writes into "
                f"{names} only"
            )
        return collection

    def add_document(
        source_uri: Annotated[
            str,
            Field(
                description="The document's name, unique in its collection, e.g. "
                "'notes/2026-03-standup.md'. The same name again replaces the document."
            ),
        ],
        content: Annotated[str, Field(description="The document's text, Markdown or plain.")],
        title: Annotated[
            str | None, Field(description="Its title (default: its first heading or line).")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description='Metadata to store with it, a JSON object, e.g. {"topic": "x"}.'),
        ] = None,
        category: Annotated[str | None, Field(description="Its category.")] = None,
        collection: WriteCollection = None,
    ) -> JobResult:
        """Add a document to the knowledge base (or replace the one of the same source_uri).
        It becomes searchable once a worker has processed it (state pending, then ready); the
        same text submitted again changes nothing. The document records that it came from
        this MCP server."""
        chosen = target(collection)
        job = call("add_document", lambda: service.submit(SubmitRequest(
            source_uri, content=content, title=title,
            metadata={**(metadata or {}), "origin": ORIGIN},
            category=category, collection=chosen,
        )))  # fmt: skip
        return JobResult.model_validate(job.to_dict())

    def remove_document(
        source_uri: Annotated[str, Field(description="The document's source_uri.")],
        collection: WriteCollection = None,
    ) -> JobResult:
        """Remove a document from the knowledge base (its chunks and links go with it) once a
        worker has processed the removal."""
        chosen = target(collection)
        job = call(
            "remove_document",
            lambda: service.remove(RemoveRequest(source_uri, collection=chosen)),
        )
        return JobResult.model_validate(job.to_dict())

    for fn in (add_document, remove_document):  # the agent reads where it may write
        fn.__doc__ = f"{fn.__doc__} This server writes into the collections: {names}."
    tool(
        add_document,
        ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True,
            open_world_hint=False,
        ),
    )  # fmt: skip
    tool(
        remove_document,
        ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True,
            open_world_hint=False,
        ),
    )  # fmt: skip


# --- stdio: every line answered -----------------------------------------------------------------


def refusal(line: str) -> dict[str, Any] | None:
    """The JSON-RPC error answering ``line`` when it is not a message the SDK can read, or None
    when it is. The error carries the line's ``id`` when it has a usable one (a string or an
    integer), else ``null``, as JSON-RPC 2.0 says."""
    from mcp_types import (
        INVALID_PARAMS,
        INVALID_REQUEST,
        PARSE_ERROR,
        JSONRPCError,
        JSONRPCNotification,
        JSONRPCRequest,
        JSONRPCResponse,
        jsonrpc_message_adapter,
    )

    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
        readable = True
    except ValidationError:
        readable = False
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, "Parse error: the line is not JSON")
    if isinstance(value, dict) and "method" in value and "id" in value:
        ident = value["id"]
        if not isinstance(ident, int | str) or isinstance(ident, bool):
            # read as a notification (an extra "id" field), it would get no answer at all
            return _error(
                None,
                INVALID_REQUEST,
                f"Invalid Request: id must be a string or an integer (got {_shown(ident)})",
            )
    if readable:
        return None
    if isinstance(value, list):
        return _error(
            None,
            INVALID_REQUEST,
            "Invalid Request: batches are not supported; one message per line",
        )
    if not isinstance(value, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: a JSON-RPC message is an object")
    ident = value.get("id")
    usable = isinstance(ident, int | str) and not isinstance(ident, bool)
    if not usable or surrogate_path(ident):
        ident = None
    where = surrogate_path(value)
    if where is not None:
        return _error(
            ident,
            INVALID_PARAMS,
            f"Invalid params: {where} holds a lone surrogate (a \\ud800-\\udfff escape not "
            "part of a pair), which is not Unicode text",
        )
    kind: type[BaseModel] = (
        (JSONRPCRequest if "id" in value else JSONRPCNotification)
        if "method" in value
        else (JSONRPCError if "error" in value else JSONRPCResponse)
    )
    try:
        kind.model_validate(value)
        detail = "not a JSON-RPC request, notification or response"
    except ValidationError as exc:
        detail = validation_text(exc)
    return _error(ident, INVALID_REQUEST, f"Invalid Request: {detail}")


def _error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


class _CheckedLines:
    """The lines of ``lines`` the SDK can read; each other one is answered with its
    :func:`refusal` through ``refused``."""

    def __init__(
        self, lines: AsyncIterable[str], refused: MemoryObjectSendStream[dict[str, Any]]
    ) -> None:
        self.lines = lines
        self.refused = refused

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for line in self.lines:
            if not line.strip():
                continue
            answer = refusal(line)
            if answer is None:
                yield line
            else:
                await self.refused.send(answer)


async def _serve_stdio(server: MCPServer[Any]) -> None:
    """``server`` over stdin and stdout, as the SDK's ``run("stdio")``, with every line it
    cannot read answered."""
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCError

    send, refused = anyio.create_memory_object_stream[dict[str, Any]](64)
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    lines = _CheckedLines(anyio.wrap_file(text), send)
    async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]

        async def answer_refusals() -> None:
            async for message in refused:
                await write_stream.send(SessionMessage(JSONRPCError.model_validate(message)))

        async with anyio.create_task_group() as group:
            group.start_soon(answer_refusals)
            lowlevel = server._lowlevel_server  # what the SDK's run_stdio_async runs
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


def run(
    service: KnowledgeService,
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8765,
    limits: Limits | None = None,
    writable: tuple[str, ...] = (),
) -> None:
    """Serve ``service`` over stdio (the default) or streamable HTTP at ``/mcp`` (with
    ``GET /metrics`` beside it), behind ``pgkb serve``'s guard and connection handling
    (:mod:`loader.serve.guard`: the ``Host`` check, body limits, the concurrency queue, the
    request head's deadline, the cap on connections) with ``limits`` (its defaults: those of
    ``pgkb serve``). ``GET /mcp``, the stream a client keeps open for the server's
    notifications, takes no slot of the queue; each tool call (``POST /mcp``) takes one.
    ``writable``: the collections the write tools may write into (none: no write tools)."""
    if not http:
        anyio.run(_serve_stdio, build_server(service, writable=writable))
        return
    metrics = Metrics(queue=service.queue if writable else None)
    metrics.model_loaded(service.model_name, service.model_load_seconds)
    server = build_server(service, metrics, writable=writable)
    server.custom_route("/metrics", methods=["GET"])(metrics_endpoint(metrics, host))
    chosen = dataclasses.replace(limits or Limits(), bound=host, token=None)
    app = guarded(server.streamable_http_app(host=host), chosen, streams=MCP_STREAMS)
    try:
        serve_forever(app, chosen, port=port)
    finally:
        metrics.close()


MCP_STREAMS = frozenset({("GET", "/mcp")})
"""The standalone stream of server notifications: open for as long as the client listens."""


def metrics_endpoint(metrics: Metrics, host: str) -> Callable[[Request], Awaitable[Response]]:
    """``GET /metrics`` beside ``/mcp``, with the ``Host`` check the SDK gives ``/mcp`` on a
    localhost address (421 for another name: a web page rebinding its name to 127.0.0.1 reads
    nothing); bound elsewhere, like ``/mcp``, it takes any name."""
    if host_name(host) not in LOCAL_NAMES:
        return metrics.endpoint

    async def endpoint(request: Request) -> Response:
        given = request.headers.get("host", "")
        if host_name(given) not in LOCAL_NAMES:
            return error(
                421,
                f"the Host header ({given[:100]!r}) does not name this server; use "
                "127.0.0.1, localhost or [::1]",
                "misdirected_request",
            )
        return await metrics.endpoint(request)

    return endpoint
