"""``pgkb serve``: the warm knowledge base over HTTP for services (Starlette on uvicorn).

Routes (JSON in, JSON out; errors as ``{"error": {"message", "type"}}``):

``POST /v1/embeddings``
    OpenAI's embeddings wire format, answered with the knowledge base's active model: a service
    in any language embeds its query in the same vector space and calls ``hybrid_search`` in
    SQL. ``input`` a string or a list of strings; ``encoding_format`` ``float`` or ``base64``
    (little-endian float32, what OpenAI's clients ask for); ``dimensions`` other than the
    model's is refused; ``model`` other than the active model's name is refused; ``input_type``
    (an extension, named as in Cohere's and Voyage's APIs) ``document`` (the default: the
    model's document prompt) or ``query`` (its query prompt, as ``pgkb search`` embeds).
``GET /v1/models``, ``POST /v1/chat/completions``
    OpenAI's chat-completions wire (:mod:`loader.serve.openai_chat`): ``pgkb`` and one
    ``pgkb/<collection>`` model per readable collection answer with citations, streamed as
    server-sent events with ``stream: true``; the embedding model is listed too.
``POST /v1/search``, ``POST /v1/ask``
    What ``pgkb search --json`` and ``pgkb ask --json`` print; ``/v1/ask`` streams
    server-sent events (``progress``, ``text``, then ``answer``) with ``"stream": true`` or
    ``Accept: text/event-stream``.
``POST /v1/documents``, ``GET /v1/documents[/{id}]``, ``PUT`` and ``DELETE /v1/documents/{id}``
    Documents written through the write queue, with the writing token
    (:mod:`loader.serve.documents`).
``GET /healthz``
    Database reachable and model loaded (503 when the database is not); needs no token.
``GET /metrics``
    Prometheus' text format (:mod:`loader.serve.metrics`); behind the token like the API.
``GET /`` and the pages under it
    The web interface (:mod:`loader.web`): signed in with a session cookie, not the bearer
    token.

Limits (:mod:`loader.serve.guard`, around the whole app): the ``Host`` header must name this
server (421), a bearer token when one is configured (``PGKB_SERVE_TOKEN``; compared in constant
time), JSON bodies only (415), a body limit in bytes (413) and in time (408), at most
``concurrency`` requests in the model and the database at once while up to ``queue_size`` others
wait up to ``queue_timeout`` seconds (then 503). uvicorn's graceful shutdown lets the requests in
flight finish, then the pool closes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from loader.app import AskRequest, BadRequest, Forbidden, NotFound, SearchRequest, surrogate_path
from loader.errors import PgkbError
from loader.serve import openai_chat
from loader.serve.documents import document_routes
from loader.serve.guard import Guard, Limits, Pages, error, serve_forever
from loader.serve.metrics import Metrics, RequestMetrics
from loader.serve.service import KnowledgeService, Unavailable
from loader.serve.streaming import Emitter, EventStream, sse
from loader.web.app import FORM_PATHS, error_page, wants_page, web_routes
from loader.web.launch import open_when_ready

if TYPE_CHECKING:  # the worker's module (the ingestion pipeline) loads only with --worker
    from loader.app.worker import BackgroundWorker

log = logging.getLogger(__name__)

MAX_BODY_BYTES = Limits.max_body


def _pgkb_error(exc: PgkbError) -> JSONResponse:
    message = exc.message + (f" ({exc.hint})" if exc.hint else "")
    if isinstance(exc, Unavailable):
        return error(503, message, "unavailable")
    if isinstance(exc, openai_chat.ModelNotFound):
        return error(404, message, "model_not_found")
    if isinstance(exc, Forbidden):
        return error(403, message, "permission_error")
    if isinstance(exc, NotFound):
        return error(404, message, "not_found")
    if isinstance(exc, BadRequest):
        return error(400, message, "invalid_request_error")
    return error(500, message, "server_error")


async def _json_body(request: Request) -> dict[str, object]:
    raw = await request.body()
    try:
        body: object = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    where = surrogate_path(body)
    if where is not None:  # "\ud800" is valid JSON but no Unicode text: PostgreSQL cannot take it
        raise BadRequest(
            f"{where} holds a lone surrogate (a \\ud800-\\udfff escape not part of a pair), "
            "which is not Unicode text",
            hint="send the text as UTF-8, or escape characters outside the BMP as surrogate pairs",
        )
    return body


def _field(
    body: dict[str, object], name: str, kind: type | tuple[type, ...], default: Any = None
) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BadRequest(f"{name} must be of type {names}, got {json.dumps(value)[:60]}")
    return value


def _unknown(body: dict[str, object], allowed: set[str]) -> None:
    extra = sorted(set(body) - allowed)
    if extra:
        raise BadRequest(
            f"unknown field(s): {', '.join(extra)}; accepted: {', '.join(sorted(allowed))}"
        )


def create_app(
    service: KnowledgeService,
    *,
    token: str | None = None,
    max_body: int = MAX_BODY_BYTES,
    write_token: str | None = None,
    max_upload: int = Limits.max_upload,
    worker: BackgroundWorker | None = None,
    concurrency: int = Limits.concurrency,
    queue_timeout: float = Limits.queue_timeout,
    queue_size: int = Limits.queue_size,
    body_timeout: float = Limits.body_timeout,
    allowed_hosts: tuple[str, ...] = (),
    bound: str = Limits.bound,
    close_service: bool = True,
    web: bool = True,
) -> ASGIApp:
    """The ASGI app serving ``service`` (opened already; closed at shutdown if
    ``close_service``), inside its :class:`~loader.serve.guard.Guard`. ``write_token``: the
    bearer token that may write through ``/v1/documents`` (None: nothing is written);
    ``worker``: a queue worker started with the app and stopped at its shutdown."""

    async def run(fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn)

    def handler(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)  # type: ignore[no-any-return]
            except PgkbError as exc:
                return _pgkb_error(exc)

        return endpoint

    async def embeddings(request: Request) -> Response:
        body = await _json_body(request)
        _unknown(body, {"input", "model", "encoding_format", "dimensions", "user", "input_type"})
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts:
            raise BadRequest("input must be a string or a non-empty list of strings")
        model = _field(body, "model", str)
        if model is not None and model != service.model_name:
            raise BadRequest(
                f"this knowledge base embeds with {service.model_name!r}, not {model!r}",
                hint=f'send "model": "{service.model_name}" (GET /v1/models lists it)',
            )
        encoding = _field(body, "encoding_format", str, "float")
        if encoding not in ("float", "base64"):
            raise BadRequest(f"encoding_format must be float or base64, got {encoding!r}")
        dims = _field(body, "dimensions", int)
        if dims is not None and dims != service.embedder.dims:
            raise BadRequest(
                f"the model {service.model_name} gives {service.embedder.dims} dimensions; "
                f"{dims} were asked for",
                hint="leave dimensions out",
            )
        input_type = _field(body, "input_type", str, "document")
        if input_type not in ("document", "query"):
            raise BadRequest(f"input_type must be document or query, got {input_type!r}")
        vectors, tokens = await run(
            lambda: service.embed_inputs(texts, query=input_type == "query")
        )
        data = []
        for i, vector in enumerate(vectors):
            value: Any = vector
            if encoding == "base64":
                import numpy as np

                value = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": service.model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def search(request: Request) -> Response:
        body = await _json_body(request)
        _unknown(
            body,
            {"query", "mode", "limit", "category", "source", "metadata", "min_similarity",
             "document_ids", "collections", "rerank"},
        )  # fmt: skip
        similarity = _field(body, "min_similarity", (int, float))
        request_ = SearchRequest.of(
            _field(body, "query", str, ""),
            mode=_field(body, "mode", str, "hybrid"),
            limit=_field(body, "limit", int),
            category=_field(body, "category", str),
            source=_field(body, "source", str),
            metadata=_field(body, "metadata", dict),
            min_similarity=None if similarity is None else float(similarity),
            document_ids=_field(body, "document_ids", list),
            collections=_field(body, "collections", list),
            rerank=_field(body, "rerank", bool),
        )
        result = await run(lambda: service.search(request_))
        request.state.pgkb_mode = result.mode
        return JSONResponse(json.loads(json.dumps(result.to_dict(), default=str)))

    async def ask(request: Request) -> Response:
        body = await _json_body(request)
        _unknown(body, {"question", "category", "collections", "agent", "stream"})
        asked = AskRequest.of(
            _field(body, "question", str, ""),
            category=_field(body, "category", str),
            collections=_field(body, "collections", list),
            agent=_field(body, "agent", bool, False),
        )
        accept = request.headers.get("accept", "")
        if not _field(body, "stream", bool, "text/event-stream" in accept):
            result = (await run(lambda: service.ask(asked))).to_json()
            request.state.pgkb_mode = result["mode"]
            return JSONResponse(json.loads(json.dumps(result, default=str)))

        def work(emit: Emitter) -> dict[str, Any]:
            return service.ask(
                asked,
                on_checked_text=lambda piece: emit("text", piece),
                progress=lambda line: emit("progress", line),
            ).to_json()

        def render(kind: str, value: Any) -> list[bytes]:
            if kind == "text":
                return [sse({"text": value}, "text")]
            if kind == "progress":
                return [sse({"message": value}, "progress")]
            if kind == "done":
                request.state.pgkb_mode = value["mode"]
                return [sse(value, "answer")]
            assert isinstance(value, PgkbError)
            return [sse({"message": value.message, "hint": value.hint}, "error")]

        return EventStream(work, render, _pgkb_error, first_events=("text", "progress", "done"))

    async def healthz(request: Request) -> Response:
        status = await run(service.health)
        return JSONResponse(status, status_code=200 if status["database"] else 503)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kinds = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
        if web and wants_page(request.url.path, request.headers.get("accept", "")):
            message = {404: f"nothing at {request.url.path}"}.get(exc.status_code, str(exc.detail))
            return error_page(exc.status_code, message)
        return error(exc.status_code, str(exc.detail), kinds.get(exc.status_code, "error"))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error in %s", request.url.path)
        if web and wants_page(request.url.path, request.headers.get("accept", "")):
            return error_page(500, "internal error; the server log has the details")
        return error(500, "internal error; the server log has the details", "server_error")

    metrics = Metrics(queue=service.queue)
    metrics.model_loaded(service.model_name, service.model_load_seconds)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if worker is not None:
            worker.start()
        try:
            yield
        finally:
            if worker is not None:
                await anyio.to_thread.run_sync(worker.stop)
            metrics.close()
            if close_service:
                service.close()

    routes = [
        Route("/v1/embeddings", handler(embeddings), methods=["POST"]),
        Route("/v1/models", handler(openai_chat.models_endpoint(service)), methods=["GET"]),
        Route(
            "/v1/chat/completions",
            handler(openai_chat.chat_completions(service, _json_body, _pgkb_error)),
            methods=["POST"],
        ),
        Route("/v1/search", handler(search), methods=["POST"]),
        Route("/v1/ask", handler(ask), methods=["POST"]),
        Route("/healthz", handler(healthz), methods=["GET"]),
        Route("/metrics", metrics.endpoint, methods=["GET"]),
        *document_routes(service, write_token=write_token, json_body=_json_body, handler=handler),
    ]
    app = Starlette(
        routes=[*routes, *(web_routes(service, token=token) if web else [])],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    guarded = Guard(
        app,
        token=token,
        max_body=max_body,
        write_token=write_token,
        max_upload=max_upload,
        concurrency=concurrency,
        queue_timeout=queue_timeout,
        queue_size=queue_size,
        body_timeout=body_timeout,
        allowed_hosts=allowed_hosts,
        bound=bound,
        pages=Pages(wants_page, error_page, FORM_PATHS, frozenset(r.path for r in routes))
        if web
        else None,
    )
    return RequestMetrics(guarded, metrics, {r.path for r in routes})


def run(
    service: KnowledgeService,
    limits: Limits,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    open_browser: bool = False,
    worker: BackgroundWorker | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; requests in flight get 10 s to finish. ``open_browser``:
    open the web interface in the default browser once the server answers; ``worker``: a
    queue worker run beside the requests (``--worker``)."""
    app = create_app(
        service,
        token=limits.token,
        max_body=limits.max_body,
        write_token=limits.write_token,
        max_upload=limits.max_upload,
        worker=worker,
        concurrency=limits.concurrency,
        queue_timeout=limits.queue_timeout,
        queue_size=limits.queue_size,
        body_timeout=limits.body_timeout,
        allowed_hosts=limits.allowed_hosts,
        bound=host,
    )
    if open_browser:
        open_when_ready(host, port)
    serve_forever(app, dataclasses.replace(limits, bound=host), port=port, log_level=log_level)
