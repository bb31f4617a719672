"""Whose turn it is to run the embedding model in the warm process (:class:`ModelTurns`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ModelTurns:
    """Whose turn it is to run the model: one call at a time (two cores: two calls at once
    would only slow each other), and a query (a search's or a question's embedding, short)
    before the next slice of a batch (``/v1/embeddings``), so a large batch delays a search by
    one slice, not by the whole batch. Queries are served in no particular order among
    themselves; a batch waits while queries keep coming."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._queries = 0

    @contextmanager
    def query(self) -> Iterator[None]:
        with self._cond:
            self._queries += 1
            try:
                self._cond.wait_for(lambda: not self._busy)
            finally:
                self._queries -= 1
            self._busy = True
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._busy and self._queries == 0)
            self._busy = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()
