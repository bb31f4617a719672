"""An ingestion run's progress on stderr: a line redrawn in place at a terminal, one line every
:data:`LOG_INTERVAL` seconds otherwise (a file, a log, cron) and a last one with the final
counts, from a :class:`~loader.ingest.progress.Tracker`.

A background thread redraws or logs on time, so the line moves (rate, time left) even while one
long embedding call runs. A run shorter than the interval logs nothing but its summary.
"""

from __future__ import annotations

import shutil
import sys
import threading
from typing import IO, Any

from loader.ingest.progress import Tracker
from loader.safety import echo

LOG_INTERVAL = 10.0
"""Seconds between two progress lines when stderr is not a terminal (or stdout is not)."""
REDRAW_INTERVAL = 0.5
BAR_WIDTH = 20


class ProgressDisplay:
    """A :class:`Tracker` (call it with the run's events) shown on ``stream`` (stderr): redrawn
    in place when ``live`` (unset: when stderr and stdout are terminals), else one line every
    ``interval`` seconds (:data:`LOG_INTERVAL`), a JSON line in a ``--json`` run, and then one at
    the end with the final counts. Use as a context manager."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        live: bool | None = None,
        interval: float | None = None,
        label: str = "ingesting",
    ) -> None:
        self.stream = stream or sys.stderr
        self._echo = stream is None
        """On stderr through :func:`~loader.safety.echo`: a ``--json`` run's lines are JSON."""
        if live is None:
            live = _isatty(self.stream) and _isatty(sys.stdout)
        self.live = live
        self.interval = REDRAW_INTERVAL if live else (interval or LOG_INTERVAL)
        self.label = label
        self.tracker = Tracker()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0
        self._logged = False
        self._lock = threading.Lock()

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        self.tracker(event, info)
        if event == "waiting":  # said at once, on a line of its own: the run may wait long
            holder = info["holder"]
            self._write(
                f"{holder} holds the ingestion lock; waiting for it (--no-wait to exit instead)",
                final=True,
            )
        elif event == "scanned" and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="pgkb-progress", daemon=True)
            self._thread.start()

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.live and self._width:
            self._write(self._text(), final=True)
        elif not self.live and self._logged:
            # a log that showed the run under way ends with where it ended, not with the last
            # tick's count (which a tick just before the last batch leaves short of the total)
            self._write(self._text(), final=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self._write(self._text(), final=not self.live)
            self._logged = True

    def _text(self) -> str:
        line = self.tracker.line()
        if not self.live:
            return f"{self.label}: after {self.tracker.elapsed()}: {line}"
        filled = round(self.tracker.fraction() * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return f"{self.label} [{bar}] {self.tracker.fraction():4.0%} {line}"

    def _write(self, text: str, *, final: bool) -> None:
        with self._lock:
            if self.live:
                columns = shutil.get_terminal_size((120, 20)).columns
                text = text[: max(20, columns - 1)]
                pad = " " * max(0, self._width - len(text))
                self.stream.write("\r" + text + pad + ("\n" if final else ""))
                self._width = 0 if final else len(text)
            elif self._echo:
                echo(text, err=True)
                return
            else:
                self.stream.write(text + "\n")
            self.stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
