"""Prometheus metrics of the warm servers (``GET /metrics`` on ``pgkb serve`` and on
``pgkb mcp --http``), with the ``prometheus-client`` library.

Each server gets its own registry (:class:`Metrics`), so two servers in one process (the tests)
never share counts. What is counted:

``pgkb_requests_total{route, mode, status}``, ``pgkb_request_seconds{route, mode}``
    Every HTTP request (or MCP tool call: ``route`` is ``tool:<name>``) with its status code
    and, for searches and answers, the mode: the search mode (``hybrid``, ``vector``,
    ``keyword``) or how the answer was settled (``model``, ``extractive``, ``abstained``,
    ``fallback``, ``agent``); ``-`` for the rest. Paths that are no route count as ``other``.
``pgkb_answers_total{mode}``, ``pgkb_abstentions_total{stage}``
    Answers by mode; "I don't know" by where it was decided: ``gate`` (before any model call)
    or ``model`` (the reply said so or cited nothing).
``pgkb_rerank_fallbacks_total``
    Searches whose reranker failed, so the fused order was kept.
``pgkb_pool_wait_seconds``, ``pgkb_pool_timeouts_total``
    Time a call waited for a pooled database connection; calls that gave up waiting.
``pgkb_model_load_seconds{model}``
    How long the embedding model took to load when the server started.
``pgkb_document_jobs{state}``, ``pgkb_document_jobs_oldest_pending_seconds``
    The write queue (``pgkb serve`` only), read through the core at each scrape as the server's
    role sees it (its collections, the newest 1,000 jobs): jobs ``pending``, ``processing`` and
    ``failed`` (failures stay until the document is submitted again), and how long the oldest
    pending job has waited (0: none). Absent from a scrape when the database does not answer.

The events come from :mod:`loader.telemetry` (which the search and answer code call); while a
server runs, its :class:`Metrics` listens to them.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loader import telemetry

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30)

serving: contextvars.ContextVar[Metrics | None] = contextvars.ContextVar(
    "pgkb_serving_metrics", default=None
)
"""The metrics of the request being handled: events raised while it is handled count there only
(the worker threads inherit it), so two servers in one process keep their own counts."""


class Metrics:
    """One server's metrics: a registry, its instruments, and the telemetry listener."""

    def __init__(self, *, queue: Callable[[], Any] | None = None) -> None:
        """``queue``: reads the write queue's state (:meth:`loader.app.core.KnowledgeBase.queue`)
        at each scrape; None: no queue gauges."""
        # imported here: `pgkb mcp` over stdio keeps no metrics and starts without it
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "pgkb_requests", "Requests by route, mode and status.", ["route", "mode", "status"],
            registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "pgkb_request_seconds", "Request latency by route and mode.", ["route", "mode"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.answers = Counter("pgkb_answers", "Answers by mode.", ["mode"], registry=r)
        self.abstentions = Counter(
            "pgkb_abstentions", 'Answers that said "I don\'t know", by stage.', ["stage"],
            registry=r,
        )  # fmt: skip
        self.rerank_fallbacks = Counter(
            "pgkb_rerank_fallbacks", "Searches whose reranker failed (fused order kept).",
            registry=r,
        )  # fmt: skip
        self.pool_wait = Histogram(
            "pgkb_pool_wait_seconds", "Time waited for a pooled database connection.",
            buckets=WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.pool_timeouts = Counter(
            "pgkb_pool_timeouts", "Calls that gave up waiting for a database connection.",
            registry=r,
        )  # fmt: skip
        self.model_load = Gauge(
            "pgkb_model_load_seconds", "Seconds the embedding model took to load at start.",
            ["model"], registry=r,
        )  # fmt: skip
        for stage in ("gate", "model"):  # present at 0 from the start: rate() needs a series
            self.abstentions.labels(stage=stage)
        if queue is not None:
            r.register(_QueueCollector(queue))
        telemetry.add_listener(self.on_event)

    def close(self) -> None:
        telemetry.remove_listener(self.on_event)

    def on_event(self, name: str, labels: dict[str, Any]) -> None:
        owner = serving.get()
        if owner is not None and owner is not self:
            return
        if name == "answer":
            self.answers.labels(mode=str(labels.get("mode", "-"))).inc()
        elif name == "abstention":
            self.abstentions.labels(stage=str(labels.get("stage", "gate"))).inc()
        elif name == "rerank_fallback":
            self.rerank_fallbacks.inc()
        elif name == "pool_wait":
            self.pool_wait.observe(float(labels.get("seconds", 0.0)))
        elif name == "pool_timeout":
            self.pool_timeouts.inc()

    def model_loaded(self, model: str, seconds: float | None) -> None:
        if seconds is not None:
            self.model_load.labels(model=model).set(seconds)

    def observe(self, route: str, mode: str, status: int | str, seconds: float) -> None:
        self.requests.labels(route=route, mode=mode, status=str(status)).inc()
        self.latency.labels(route=route, mode=mode).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The registry in Prometheus' text format, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def endpoint(self, request: Request) -> Response:
        body, content_type = await anyio.to_thread.run_sync(self.exposition)  # reads the queue
        return Response(body, media_type=content_type.split(";")[0], headers={
            "Content-Type": content_type})  # fmt: skip


class RequestMetrics:
    """ASGI middleware: counts every HTTP request by route, mode and status, and its latency.

    ``routes``: the paths that are routes (anything else counts as ``other``, so a scan of
    random paths cannot create series without end). The mode is what the endpoint put in
    ``request.state.pgkb_mode`` (the scope's ``state``), else ``-``."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Iterable[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = frozenset(routes)
        self.templates = sorted(
            ((r.split("{", 1)[0], r) for r in self.routes if "{" in r), reverse=True
        )
        """Routes with a path parameter (``/v1/documents/{id}``): a path counts as its route."""

    def route(self, path: str) -> str:
        if path in self.routes:
            return path
        for prefix, template in self.templates:
            rest = path[len(prefix) :]
            if path.startswith(prefix) and rest and "/" not in rest:
                return template
        return "other"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = self.route(path)
        started = time.perf_counter()
        status = 500
        scope.setdefault("state", {})

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        token = serving.set(self.metrics)
        try:
            await self.app(scope, receive, send_status)
        finally:
            serving.reset(token)
            mode = str(scope["state"].get("pgkb_mode", "-"))
            self.metrics.observe(route, mode, status, time.perf_counter() - started)


class _QueueCollector:
    """The write queue's gauges, read when Prometheus scrapes (a failed read leaves them out)."""

    def __init__(self, read: Callable[[], Any]) -> None:
        self.read = read

    def describe(self) -> list[Any]:
        return []  # never collected at registration (no database call then)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            state = self.read()
        except Exception:  # the database is down: /metrics still answers
            return
        jobs = GaugeMetricFamily(
            "pgkb_document_jobs", "Jobs of the write queue by state.", labels=["state"]
        )
        for name in ("pending", "processing", "failed"):
            jobs.add_metric([name], float(getattr(state, name)))
        yield jobs
        yield GaugeMetricFamily(
            "pgkb_document_jobs_oldest_pending_seconds",
            "Seconds the oldest pending job of the write queue has waited (0: none pending).",
            value=float(state.oldest_pending_seconds or 0.0),
        )
