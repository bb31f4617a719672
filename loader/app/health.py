"""The knowledge base's health as the status page shows it: a run of ``pgkb doctor``'s checks,
kept for :data:`DOCTOR_SECONDS`, then run again in the background (``?recheck=1`` runs them at
once); the first page waits for them."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

import psycopg

from loader.errors import PgkbError
from loader.ops.doctor import run_checks
from loader.settings import Settings

log = logging.getLogger(__name__)

DOCTOR_SECONDS = 300.0
"""How long the status page shows a run of ``pgkb doctor``'s checks before it runs them again
(in the background; ``?recheck=1`` runs them at once)."""


@dataclasses.dataclass
class DoctorRun:
    checks: list[Any]
    at: float
    error: str | None = None


class DoctorRuns:
    """The last run of the checks for one server, and at most one run under way."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._last: DoctorRun | None = None
        self._lock = threading.Lock()
        self._running = False

    def run(self) -> None:
        """Run ``pgkb doctor``'s checks as the server's role and keep the result (or why they
        could not run: a ``--read`` role may not read what some checks read)."""
        try:
            run = DoctorRun(run_checks(self.settings), time.time())
        except (PgkbError, psycopg.Error) as exc:
            message = exc.message if isinstance(exc, PgkbError) else str(exc).strip()
            run = DoctorRun([], time.time(), message.splitlines()[0] if message else "error")
        except Exception:
            log.exception("pgkb doctor's checks failed")
            run = DoctorRun([], time.time(), "internal error; the server log has the details")
        with self._lock:
            self._last = run
            self._running = False

    def checks(self, recheck: bool) -> DoctorRun | None:
        """The last run of the checks; a new one when asked (``recheck``) or the first time
        (waited for), or in the background when the last is older than :data:`DOCTOR_SECONDS`."""
        with self._lock:
            current = self._last
            stale = current is None or time.time() - current.at > DOCTOR_SECONDS
            start = (recheck or stale) and not self._running
            if start:
                self._running = True
        if start and (recheck or current is None):
            self.run()
        elif start:
            threading.Thread(target=self.run, name="pgkb-web-doctor", daemon=True).start()
        with self._lock:
            return self._last

    def warm(self) -> None:
        """Run the checks in the background once, so the first status page has them."""
        with self._lock:
            if self._running or self._last is not None:
                return
            self._running = True
        threading.Thread(target=self.run, name="pgkb-web-doctor", daemon=True).start()
