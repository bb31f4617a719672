"""``pgkb serve``: the warm knowledge base over HTTP for services (Starlette on uvicorn).

Routes (JSON in, JSON out; errors as ``{"error": {"message", "type"}}``):

``POST /v1/embeddings``
    OpenAI's embeddings wire format, answered with the knowledge base's active model: a service
    in any language embeds its query in the same vector space and calls ``hybrid_search`` in
    SQL. ``input`` a string or a list of strings; ``encoding_format`` ``float`` or ``base64``
    (little-endian float32, what OpenAI's clients ask for); ``dimensions`` other than the
    model's is refused; ``model`` other than the active model's name is refused.
``GET /v1/models``
    The one model, OpenAI's list format.
``POST /v1/search``, ``POST /v1/ask``
    What ``pgkb search --json`` and ``pgkb ask --json`` print.
``GET /healthz``
    Database reachable and model loaded (503 when the database is not); needs no token.

Limits: a bearer token when one is configured (``PGKB_SERVE_TOKEN``; compared in constant
time), a request body limit (413), at most ``concurrency`` requests in the model and the
database at once while the others wait up to ``queue_timeout`` seconds (then 503). uvicorn's
graceful shutdown lets the requests in flight finish, then the pool closes.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loader.errors import PgkbError
from loader.serve.service import BadRequest, KnowledgeService, Unavailable, parse_document_ids

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000
OPEN_PATHS = frozenset({"/healthz"})


def error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def _pgkb_error(exc: PgkbError) -> JSONResponse:
    message = exc.message + (f" ({exc.hint})" if exc.hint else "")
    if isinstance(exc, Unavailable):
        return error(503, message, "unavailable")
    if isinstance(exc, BadRequest):
        return error(400, message, "invalid_request_error")
    return error(500, message, "server_error")


class Guard:
    """ASGI middleware: bearer token, body size limit and concurrency limit, in that order."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body: int,
        concurrency: int,
        queue_timeout: float,
    ) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body
        self.queue_timeout = queue_timeout
        self.limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.token and path not in OPEN_PATHS and not self._authorised(scope):
            response = error(401, "missing or wrong bearer token", "authentication_error")
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await self._too_large(scope, receive, send)
            return
        if path in OPEN_PATHS:
            await self.app(scope, self._limited(receive), send)
            return
        try:
            with anyio.fail_after(self.queue_timeout):
                await self.limiter.acquire()
        except TimeoutError:
            await error(
                503,
                f"the server is busy (more than {int(self.limiter.total_tokens)} requests at "
                f"once for {self.queue_timeout:g} s); retry later",
                "unavailable",
            )(scope, receive, send)
            return
        try:
            await self.app(scope, self._limited(receive), send)
        finally:
            self.limiter.release()

    def _authorised(self, scope: Scope) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, given = header.partition(" ")
        assert self.token is not None
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await error(413, f"the request body exceeds {self.max_body} bytes", "request_too_large")(
            scope, receive, send
        )

    def _limited(self, receive: Receive) -> Receive:
        """``receive`` that stops a chunked body past the limit (no Content-Length to check)."""
        seen = 0
        max_body = self.max_body

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_body:
                    raise HTTPException(413, f"the request body exceeds {max_body} bytes")
            return message

        return wrapped


async def _json_body(request: Request) -> dict[str, object]:
    raw = await request.body()
    try:
        body: object = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
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
    concurrency: int = 8,
    queue_timeout: float = 30.0,
    close_service: bool = True,
) -> ASGIApp:
    """The ASGI app serving ``service`` (opened already; closed at shutdown if
    ``close_service``)."""

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
        _unknown(body, {"input", "model", "encoding_format", "dimensions", "user"})
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
        vectors, tokens = await run(lambda: service.embed(texts))
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

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": service.model_name, "object": "model", "owned_by": "pgkb"}],
            }
        )

    async def search(request: Request) -> Response:
        body = await _json_body(request)
        _unknown(
            body,
            {"query", "mode", "limit", "category", "source", "metadata", "min_similarity",
             "document_ids", "collections"},
        )  # fmt: skip
        similarity = _field(body, "min_similarity", (int, float))
        ids = _field(body, "document_ids", list)
        result = await run(
            lambda: service.search(
                _field(body, "query", str, ""),
                mode=_field(body, "mode", str, "hybrid"),
                limit=_field(body, "limit", int),
                category=_field(body, "category", str),
                source=_field(body, "source", str),
                metadata=_field(body, "metadata", dict),
                min_similarity=None if similarity is None else float(similarity),
                document_ids=parse_document_ids(ids),
                collections=_field(body, "collections", list),
            )
        )
        return JSONResponse(json.loads(json.dumps(result, default=str)))

    async def ask(request: Request) -> Response:
        body = await _json_body(request)
        _unknown(body, {"question", "category", "collections"})
        result = await run(
            lambda: service.ask(
                _field(body, "question", str, ""),
                category=_field(body, "category", str),
                collections=_field(body, "collections", list),
            )
        )
        return JSONResponse(json.loads(json.dumps(result, default=str)))

    async def healthz(request: Request) -> Response:
        status = await run(service.health)
        return JSONResponse(status, status_code=200 if status["database"] else 503)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kinds = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
        return error(exc.status_code, str(exc.detail), kinds.get(exc.status_code, "error"))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error in %s", request.url.path)
        return error(500, "internal error; the server log has the details", "server_error")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_service:
                service.close()

    app = Starlette(
        routes=[
            Route("/v1/embeddings", handler(embeddings), methods=["POST"]),
            Route("/v1/models", handler(models), methods=["GET"]),
            Route("/v1/search", handler(search), methods=["POST"]),
            Route("/v1/ask", handler(ask), methods=["POST"]),
            Route("/healthz", handler(healthz), methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    return Guard(
        app,
        token=token,
        max_body=max_body,
        concurrency=concurrency,
        queue_timeout=queue_timeout,
    )


def run(
    service: KnowledgeService,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    max_body: int = MAX_BODY_BYTES,
    concurrency: int = 8,
    log_level: str = "info",
) -> None:
    """Serve until SIGINT/SIGTERM; requests in flight get 10 s to finish."""
    import uvicorn

    app = create_app(service, token=token, max_body=max_body, concurrency=concurrency)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
        limit_concurrency=max(64, concurrency * 8),
        server_header=False,
    )
