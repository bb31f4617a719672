"""Server-sent events from a blocking call: the call runs on a worker thread and hands its
pieces (text, progress) to the response as they come.

:class:`EventStream` is a Starlette response whose status is decided by the call's first
event: when the call fails before it produced anything (a bad argument, the database down), the
client gets the usual JSON error with its 4xx/5xx status; once something was produced the
response is ``200 text/event-stream`` and a later failure is sent as a last event. A client
that goes away stops the call at its next piece (:class:`ClientGone` raised in the worker).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from loader.errors import PgkbError

log = logging.getLogger(__name__)


class ClientGone(Exception):
    """Raised in the worker when the client disconnected: stop working for it."""


class Emitter:
    """What the worker calls: ``emit(kind, value)`` for each piece, from its thread."""

    def __init__(self, send: Any) -> None:
        self._send = send
        self.gone = False

    def __call__(self, kind: str, value: Any) -> None:
        if self.gone:
            raise ClientGone()
        try:
            anyio.from_thread.run_sync(self._send.send_nowait, (kind, value))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.gone = True
            raise ClientGone() from None


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line and the JSON ``data:`` line."""
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return f"{head}data: {payload}\n\n".encode()


class EventStream(Response):
    """Run ``work(emit)`` on a worker thread and stream what it emits.

    ``render(kind, value)`` returns the bytes for each event; ``error_response(exc)`` the JSON
    response for a failure that comes before anything was sent; ``on_done(result)`` is told the
    result (the metrics read the answer's mode from it)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        work: Callable[[Emitter], Any],
        render: Callable[[str, Any], list[bytes]],
        error_response: Callable[[PgkbError], Response],
        *,
        first_events: tuple[str, ...] = ("text", "done"),
    ) -> None:
        super().__init__(
            status_code=200,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        # no Content-Length: the body is as long as the answer
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.work = work
        self.renderer = render
        self.error_response = error_response
        self.first_events = first_events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sender, events = anyio.create_memory_object_stream[tuple[str, Any]](math.inf)
        emitter = Emitter(sender)

        def run() -> None:
            try:
                result = self.work(emitter)
            except ClientGone:
                return
            except PgkbError as exc:
                _put(sender, ("error", exc))
                return
            except Exception:
                log.exception("unexpected error while streaming %s", scope.get("path"))
                _put(sender, ("error", PgkbError("internal error; the server log has the details")))
                return
            _put(sender, ("done", result))

        async with anyio.create_task_group() as group:
            group.start_soon(self._worker, run, sender)
            group.start_soon(self._watch, receive, emitter, group.cancel_scope)
            try:
                await self._relay(events, scope, receive, send)
            finally:
                emitter.gone = True  # stop the worker at its next piece, if it is still going
                group.cancel_scope.cancel()

    async def _relay(self, events: Any, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        held: list[tuple[str, Any]] = []
        async with events:
            async for kind, value in events:
                if not started:
                    if kind == "error":
                        await self.error_response(value)(scope, receive, send)
                        return
                    held.append((kind, value))
                    if kind not in self.first_events:
                        continue
                    start = {"type": "http.response.start", "status": 200}
                    await send({**start, "headers": self.raw_headers})
                    started = True
                    pending, held = held, []
                    for k, v in pending:
                        await self._body(send, self.renderer(k, v))
                else:
                    await self._body(send, self.renderer(kind, value))
                if kind in ("done", "error"):
                    break
        if not started:  # the worker ended without a word (it cannot, but never hang a client)
            await self.error_response(PgkbError("the answer ended early"))(scope, receive, send)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(self, receive: Receive, emitter: Emitter, scope: Any) -> None:
        """Wait for the client to disconnect; then stop the worker and the response."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                emitter.gone = True
                scope.cancel()
                return

    async def _worker(self, run: Callable[[], None], sender: Any) -> None:
        try:
            await anyio.to_thread.run_sync(run)
        finally:
            await sender.aclose()

    async def _body(self, send: Send, chunks: list[bytes]) -> None:
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})


def _put(sender: Any, item: tuple[str, Any]) -> None:
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        anyio.from_thread.run_sync(sender.send_nowait, item)
