"""A queue worker (:class:`loader.ingest.jobs.Worker`, what ``pgkb worker`` runs) in a thread of
another process: ``pgkb serve --worker`` starts one beside its requests and stops it at shutdown.

The adapters reach the worker through here only (they may not import :mod:`loader.ingest`).
"""

from __future__ import annotations

import logging
import threading

from loader.db import queries
from loader.db.session import connection
from loader.errors import ConfigError
from loader.ingest.jobs import Worker
from loader.providers.embeddings import Embedder
from loader.settings import Settings

log = logging.getLogger(__name__)


class BackgroundWorker:
    """One :class:`~loader.ingest.jobs.Worker` in a daemon thread: :meth:`start`, then
    :meth:`stop` (the job in hand is finished first, up to ``timeout`` seconds)."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.worker = Worker(settings, embedder=embedder)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> BackgroundWorker:
        """Refuse (:class:`ConfigError`) a role that may not take jobs from the queue, before
        the server starts, rather than a worker thread that stops at its first claim."""
        with connection(self.worker.settings) as conn:
            row = conn.execute(queries.CAN_CLAIM_JOBS).fetchone()
            role = conn.info.user
        if not (row and row[0]):
            raise ConfigError(
                f"--worker: the role {role} may not take jobs from the write queue",
                hint=f"a worker needs a loader role (pgkb db grant {role} --write, every "
                "collection); or run pgkb worker as one beside this server",
            )
        return self

    def start(self) -> BackgroundWorker:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pgkb-worker", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.worker.run(stop=self._stop)
        except Exception:  # the server keeps answering; the log says why the queue stopped
            log.exception("pgkb serve --worker: the worker stopped")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning(
                    "pgkb serve --worker: the worker's job outlived %s s at shutdown", timeout
                )
            self._thread = None
