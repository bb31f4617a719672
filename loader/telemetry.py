"""What pgkb tells an operator while it works: events for the servers' metrics, and
OpenTelemetry spans when the OpenTelemetry API is installed.

Two small hooks the rest of the code calls, both free when nobody listens:

- :func:`event` (``abstention``, ``rerank_fallback``, ...): the servers install a listener
  (:mod:`loader.serve.metrics`) that turns events into Prometheus counters; with no listener an
  event costs a list lookup.
- :func:`span` (``pgkb.search``, ``pgkb.ask``, ``pgkb.ingest``): an OpenTelemetry span when the
  ``opentelemetry-api`` package is importable (its tracer provider decides where spans go: none
  configured, no-op spans); otherwise nothing. pgkb never depends on OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

Listener = Callable[[str, dict[str, Any]], None]

EVENTS = (
    "abstention",  # an answer said "I don't know"; labels: stage (gate or model)
    "rerank_fallback",  # the reranker failed, the fused order was kept
    "answer",  # an answer was settled; labels: mode
)

_listeners: list[Listener] = []
_lock = threading.Lock()


def add_listener(listener: Listener) -> None:
    """Call ``listener(name, labels)`` for every :func:`event` from now on."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def event(name: str, **labels: Any) -> None:
    """Tell the listeners that ``name`` happened; a failing listener is logged, never raised."""
    for listener in tuple(_listeners):
        try:
            listener(name, labels)
        except Exception:  # metrics must never break a search
            log.debug("telemetry listener failed on %s", name, exc_info=True)


_tracer: Any = None
_tracer_checked = False


def _get_tracer() -> Any:
    global _tracer, _tracer_checked
    if not _tracer_checked:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = None
        else:
            _tracer = trace.get_tracer("pgkb")
        _tracer_checked = True
    return _tracer


class Span:
    """What a ``with span(...)`` block may add to its span (nothing when there is none)."""

    def __init__(self, otel: Any = None) -> None:
        self._otel = otel

    def set(self, **attributes: Any) -> None:
        if self._otel is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self._otel.set_attribute(f"pgkb.{key}", value)


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """An OpenTelemetry span named ``name`` (attributes prefixed ``pgkb.``) around the block
    when OpenTelemetry is installed; an exception is recorded on the span and re-raised."""
    tracer = _get_tracer()
    if tracer is None:
        yield Span()
        return
    with tracer.start_as_current_span(name) as otel:
        handle = Span(otel)
        handle.set(**attributes)
        yield handle
