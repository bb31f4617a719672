"""What stands between ``pgkb serve`` and its clients: one ASGI middleware wrapping the whole app
(every route, the JSON API and anything mounted beside it) and uvicorn's connection handling.

:class:`Guard`, in the order it applies them to each request:

1. **Host check** (DNS rebinding): the ``Host`` header must name this server: a localhost name,
   the address it is bound to (any IP address when bound to every address), or a name allowed
   by ``serve_allowed_hosts``; otherwise 421. A web page that rebinds its own name to 127.0.0.1
   sends its own name, so it never reaches a route.
2. **Bearer token** (when one is configured), compared in constant time; ``/healthz`` needs none
   (``/metrics`` needs it but, like ``/healthz``, takes no slot in the queue). The writing token
   (``serve_write_token``) is accepted wherever the token is; which routes need it is the
   routes' business (``/v1/documents``' writes).
3. **JSON bodies only**: a POST, PUT or PATCH must declare ``Content-Type: application/json``
   (415 otherwise): a page can send ``text/plain``, a form or a typeless blob to another origin
   without asking (a CORS "simple" request), but never ``application/json``. The one exception:
   the web interface's form paths (:attr:`Pages.form_paths`, sign-in and sign-out) take a POST
   of ``application/x-www-form-urlencoded``, and check its CSRF value and origin themselves;
   and the upload paths (:attr:`upload_paths`, ``/v1/documents``) take ``multipart/form-data``
   too: a page can send one to another origin, but never with the ``Authorization`` header
   every write there needs (the writing token), so nothing is written that way.
4. **The body, read whole before any slot is taken**, within ``max_body`` bytes
   (``max_upload`` for a ``multipart/form-data`` upload) (413) and
   ``body_timeout`` seconds in all (408, connection closed): a client sending a byte at a time
   holds its own connection, never a slot the others need.
5. **The queue**: at most ``concurrency`` requests in the model and the database at once; up
   to ``queue_size`` more wait their turn (first come, first served) for ``queue_timeout``
   seconds; past either, a 503 with ``Retry-After``. The web interface's form posts (sign-in,
   sign-out: no model, no database) never enter it: a wrong token's sign-in waits out its
   penalty (half a second, against guessing), and 300 of them would otherwise hold every slot
   while the API's calls waited or got 503s. At most :data:`FORM_CONCURRENCY` of them are
   handled at once, apart from the queue; past that, a 429 with ``Retry-After`` at once.

Its refusals are JSON ``{"error": {"message", "type"}}``, but HTML pages (:class:`Pages`) for a
web interface's requests: a browser shows the page, never a JSON object.

:func:`server_config` gives uvicorn a protocol (:func:`_protocol`) that closes a connection
whose request head is not complete ``header_timeout`` seconds after it opened (or after its
previous response), that cuts a connection whose client reads nothing of its response for
``write_timeout`` seconds (a stream it never reads would hold its slot forever, a large body
its memory), that keeps at most ``max_connections`` open (a new connection past it
closes the longest-idle one), and no ``limit_concurrency``: uvicorn's counts open connections,
so idle sockets would turn every request away with a plain-text 503.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

import anyio
import h11
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz"})
"""Paths that need no token (and take no slot)."""
UNQUEUED_PATHS = OPEN_PATHS | {"/metrics"}
"""Paths that take no slot: a busy server still answers its probes and its scraper (``/metrics``
needs the token all the same)."""
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON_TYPES = ("application/json",)
FORM_TYPE = "application/x-www-form-urlencoded"
FORM_CONCURRENCY = 16
"""The web interface's form posts (sign-in, sign-out) handled at once, in slots of their own:
a wrong token's sign-in holds one for its penalty, never one of the API's."""

MULTIPART_TYPE = "multipart/form-data"
UPLOAD_PREFIX = "/v1/documents"
"""The paths whose POST and PUT may carry a ``multipart/form-data`` upload: this one and those
under it."""


def is_upload_path(path: str) -> bool:
    return path == UPLOAD_PREFIX or path.startswith(UPLOAD_PREFIX + "/")


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits ``pgkb serve`` applies; the defaults are its options' defaults."""

    token: str | None = None
    max_body: int = 1_000_000
    write_token: str | None = None
    max_upload: int = 20_000_000
    concurrency: int = 8
    queue_size: int = 256
    queue_timeout: float = 30.0
    body_timeout: float = 30.0
    header_timeout: float = 10.0
    write_timeout: float = 30.0
    max_connections: int = 512
    allowed_hosts: tuple[str, ...] = ()
    bound: str = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Pages:
    """A web interface served beside the JSON API, as the :class:`Guard` needs to know it."""

    wants_page: Callable[[str, str], bool]
    """Whether a request for this path with this ``Accept`` header is a browser's: it needs no
    bearer token (the pages check their own session cookie; other paths are not found), unless
    the path is one of :attr:`api_paths`, and gets the Guard's refusals as pages."""
    error_page: Callable[[int, str], Response]
    """A refusal (status, message) as an HTML page."""
    form_paths: frozenset[str] = frozenset()
    """Paths whose POST may carry ``application/x-www-form-urlencoded`` instead of JSON."""
    api_paths: frozenset[str] = frozenset()
    """The JSON API's routes (``/metrics`` among them): they need the bearer token whatever the
    ``Accept`` header says, so a browser's ``text/html`` is no way around it."""


def error(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind}}, status_code=status, headers=headers
    )


def host_name(header: str) -> str:
    """The name or address of a ``Host`` header, without its port, lower case, brackets of an
    IPv6 address removed (``[::1]:8000`` -> ``::1``)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        value = name
    return value.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """ASGI middleware: Host check, bearer token, JSON bodies, body limits and the queue (the
    module's docstring says why each, in this order)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        max_body: int = Limits.max_body,
        write_token: str | None = None,
        max_upload: int = Limits.max_upload,
        concurrency: int = Limits.concurrency,
        queue_timeout: float = Limits.queue_timeout,
        queue_size: int = Limits.queue_size,
        body_timeout: float = Limits.body_timeout,
        allowed_hosts: tuple[str, ...] = (),
        bound: str = Limits.bound,
        pages: Pages | None = None,
        streams: frozenset[tuple[str, str]] = frozenset(),
    ) -> None:
        """``streams``: (method, path) of requests that open a long-lived stream which waits
        for events and does no work of its own (``GET /mcp``): they take no slot, which they
        would hold for as long as the client listens."""
        self.app = app
        self.streams = streams
        self.token = token
        self.write_token = write_token
        self.pages = pages
        self.max_body = max_body
        self.max_upload = max_upload
        self.concurrency = max(1, concurrency)
        self.queue_timeout = queue_timeout
        self.queue_size = max(0, queue_size)
        self.body_timeout = body_timeout
        bound_name = host_name(bound)
        self.any_address = bound_name in ANY_ADDRESS
        configured = {host_name(h) for h in allowed_hosts if h.strip()}
        self.any_host = "*" in configured
        self.hosts = frozenset(LOCAL_NAMES | configured | ({bound_name} - ANY_ADDRESS))
        self.slots = anyio.Semaphore(self.concurrency)
        self.form_slots = anyio.Semaphore(FORM_CONCURRENCY)
        self.waiting = 0
        """Requests waiting for a slot now."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        refusal = self._host_refusal(headers)
        if refusal is None and scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        if refusal is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self._refuse(scope, receive, send, 421, refusal, "misdirected_request")
            return
        path = scope.get("path", "")
        # a browser's: pages check their session, others are 404; never an API route
        page = self._is_page(scope) and self.pages is not None and path not in self.pages.api_paths
        if (
            self.token
            and path not in OPEN_PATHS
            and not page
            and not self._authorised(headers, self.token)
            and not (self.write_token and self._authorised(headers, self.write_token))
        ):
            response = error(401, "missing or wrong bearer token", "authentication_error")
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        if scope.get("method") in BODY_METHODS and not self._body_type_allowed(path, headers):
            await self._refuse(
                scope,
                receive,
                send,
                415,
                "the request body must be JSON, sent with Content-Type: application/json",
                "unsupported_media_type",
            )
            return
        limit = self.max_upload if self._is_upload(path, headers) else self.max_body
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await self._too_large(scope, receive, send, limit)
            return
        body = await self._read_body(scope, receive, send, limit)
        if body is None:  # answered already (too large, too slow) or the client left
            return
        if path in UNQUEUED_PATHS or (scope.get("method"), path) in self.streams:
            await self.app(scope, _replay(body, receive), send)
            return
        if self._is_form_post(scope):
            await self._form_post(scope, _replay(body, receive), send)
            return
        if self.waiting >= self.queue_size and not self._slot_free():
            await self._busy(
                f"the server is busy: {self.concurrency} requests are being served and "
                f"{self.waiting} wait in the queue, which is full; retry later",
                scope,
                receive,
                send,
            )
            return
        self.waiting += 1
        try:
            with anyio.fail_after(self.queue_timeout):
                await self.slots.acquire()
        except TimeoutError:
            await self._busy(
                f"the server is busy: no slot came free within {self.queue_timeout:g} s "
                f"({self.concurrency} requests are served at once); retry later",
                scope,
                receive,
                send,
            )
            return
        finally:
            self.waiting -= 1
        try:
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.slots.release()

    def _slot_free(self) -> bool:
        return self.slots.value > 0

    def _is_form_post(self, scope: Scope) -> bool:
        return (
            self.pages is not None
            and scope.get("method") == "POST"
            and scope.get("path", "") in self.pages.form_paths
        )

    async def _form_post(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A sign-in or sign-out: in one of the form slots, never the queue's (a wrong token's
        penalty would hold a slot the API needs); none free: 429 at once."""
        try:
            self.form_slots.acquire_nowait()
        except anyio.WouldBlock:
            await self._refuse(
                scope,
                receive,
                send,
                429,
                f"too many sign-ins at once ({FORM_CONCURRENCY} are being handled); retry in a "
                "moment",
                "rate_limited",
                {"Retry-After": "1"},
            )
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.form_slots.release()

    def _is_page(self, scope: Scope) -> bool:
        """Whether the request is for the web interface (:attr:`Pages.wants_page`)."""
        if self.pages is None:
            return False
        accept = dict(scope.get("headers") or []).get(b"accept", b"").decode("latin-1")
        return self.pages.wants_page(scope.get("path", ""), accept)

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        message: str,
        kind: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer ``status``: an HTML page for the web interface's requests, else JSON."""
        response: Response
        if self.pages is not None and self._is_page(scope):
            response = self.pages.error_page(status, message)
            response.headers.update(headers or {})
        else:
            response = error(status, message, kind, headers)
        await response(scope, receive, send)

    def _host_refusal(self, headers: dict[bytes, bytes]) -> str | None:
        """None when the ``Host`` header names this server, else why not (for the 421)."""
        if self.any_host:
            return None
        raw = headers.get(b"host")
        name = host_name(raw.decode("latin-1")) if raw is not None else ""
        if name and (name in self.hosts or (self.any_address and _is_address(name))):
            return None
        shown = repr(raw.decode("latin-1")[:100]) if raw is not None else "none"
        return (
            f"the Host header ({shown}) does not name this server; use a localhost name or "
            "its address, or allow the name with PGKB_SERVE_ALLOWED_HOSTS (serve_allowed_hosts) "
            "or --allowed-host"
        )

    def _authorised(self, headers: dict[bytes, bytes], token: str) -> bool:
        return bearer_matches(headers.get(b"authorization", b"").decode("latin-1"), token)

    def _body_type_allowed(self, path: str, headers: dict[bytes, bytes]) -> bool:
        """JSON, or a form on one of the web interface's form paths (sign-in, sign-out)."""
        value = headers.get(b"content-type", b"").decode("latin-1")
        media = value.split(";", 1)[0].strip().lower()
        if media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json")):
            return True
        if media == MULTIPART_TYPE and is_upload_path(path):
            return True
        return media == FORM_TYPE and self.pages is not None and path in self.pages.form_paths

    @staticmethod
    def _is_upload(path: str, headers: dict[bytes, bytes]) -> bool:
        value = headers.get(b"content-type", b"").decode("latin-1")
        return is_upload_path(path) and value.split(";", 1)[0].strip().lower() == MULTIPART_TYPE

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        hint = ""
        if limit < self.max_upload and is_upload_path(scope.get("path", "")):
            hint = f"; a file may come as a multipart/form-data upload of up to {self.max_upload}"
        await self._refuse(
            scope,
            receive,
            send,
            413,
            f"the request body exceeds {limit} bytes{hint}",
            "request_too_large",
            {"Connection": "close"},
        )

    async def _busy(self, message: str, scope: Scope, receive: Receive, send: Send) -> None:
        retry = max(1, int(self.queue_timeout // 10))
        await self._refuse(
            scope, receive, send, 503, message, "unavailable", {"Retry-After": str(retry)}
        )

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, limit: int
    ) -> bytes | None:
        """The whole body, or None after answering 413 (too large) or 408 (not sent within
        ``body_timeout`` seconds), or when the client went away."""
        chunks: list[bytes] = []
        seen = 0
        with anyio.move_on_after(self.body_timeout) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                piece = message.get("body", b"")
                seen += len(piece)
                if seen > limit:
                    await self._too_large(scope, receive, send, limit)
                    return None
                chunks.append(piece)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        assert deadline.cancelled_caught
        await self._refuse(
            scope,
            receive,
            send,
            408,
            f"the request body did not arrive within {self.body_timeout:g} s",
            "request_timeout",
            {"Connection": "close"},
        )
        return None


def guarded(
    app: ASGIApp,
    limits: Limits,
    *,
    pages: Pages | None = None,
    streams: frozenset[tuple[str, str]] = frozenset(),
) -> Guard:
    """``app`` inside a :class:`Guard` with ``limits`` (``pgkb serve``'s, ``pgkb mcp --http``'s)."""
    return Guard(
        app,
        token=limits.token,
        max_body=limits.max_body,
        write_token=limits.write_token,
        max_upload=limits.max_upload,
        concurrency=limits.concurrency,
        queue_timeout=limits.queue_timeout,
        queue_size=limits.queue_size,
        body_timeout=limits.body_timeout,
        allowed_hosts=limits.allowed_hosts,
        bound=limits.bound,
        pages=pages,
        streams=streams,
    )


def serve_forever(app: ASGIApp, limits: Limits, *, port: int, log_level: str = "info") -> None:
    """Run ``app`` (guarded already) on uvicorn with ``limits``' connection handling
    (:func:`server_config`) until SIGINT/SIGTERM."""
    import uvicorn

    config = server_config(
        app,
        host=limits.bound,
        port=port,
        header_timeout=limits.header_timeout,
        write_timeout=limits.write_timeout,
        max_connections=limits.max_connections,
        log_level=log_level,
    )
    uvicorn.Server(config).run()


def bearer_matches(header: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` as its bearer token (compared in
    constant time)."""
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("latin-1", "replace"), token.encode("latin-1", "replace")
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the app: the body read already, then the client's own messages (its
    disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _protocol(
    header_timeout: float, max_connections: int, write_timeout: float = Limits.write_timeout
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline on each request head, a deadline on a response
    the client does not read, and a cap on connections."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None
        write_timer: asyncio.TimerHandle | None = None
        idle_since = 0.0

        def pause_writing(self) -> None:
            """The response waits for the client to read (uvicorn's buffer is full): if it reads
            nothing more for ``write_timeout`` seconds, the connection is cut, so a client that
            never reads holds no slot (a stream would wait for it forever) and no buffer."""
            super().pause_writing()
            if self.write_timer is None:
                self.write_timer = self.loop.call_later(write_timeout, self._write_overdue)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._cancel_write_timer()

        def _cancel_write_timer(self) -> None:
            if self.write_timer is not None:
                self.write_timer.cancel()
                self.write_timer = None

        def _write_overdue(self) -> None:
            self.write_timer = None
            if self.flow.write_paused:
                log.info(
                    "closing a connection that read nothing of its response for %s s",
                    write_timeout,
                )
                self.transport.abort()  # close() would wait for the buffer to be read

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._await_head()
            if len(self.connections) > max_connections:
                self._make_room()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the head arrived
                self._cancel_head_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()  # the next request's head has the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            self._cancel_write_timer()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._cancel_head_timer()
            self.idle_since = self.loop.time()
            self.head_timer = self.loop.call_later(header_timeout, self._head_overdue)

        def _cancel_head_timer(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def _head_overdue(self) -> None:
            self.head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.debug("closing a connection that sent no request within %s s", header_timeout)
                self.transport.close()

        def _idle(self) -> bool:
            return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

        def _make_room(self) -> None:
            idle = [c for c in self.connections if isinstance(c, Protocol) and c._idle()]
            others = [c for c in idle if c is not self]
            oldest = min(others, key=lambda c: c.idle_since) if others else self
            log.warning(
                "more than %d connections open: closing the one idle longest", max_connections
            )
            oldest.transport.close()

    return Protocol


def server_config(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    header_timeout: float = Limits.header_timeout,
    max_connections: int = Limits.max_connections,
    write_timeout: float = Limits.write_timeout,
    log_level: str = "info",
) -> Any:
    """The ``uvicorn.Config`` ``pgkb serve`` runs ``app`` with (the tests run the same)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=_protocol(header_timeout, max_connections, write_timeout),
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,
        limit_concurrency=None,  # counts connections, idle ones too: the Guard queues requests
        server_header=False,
    )
