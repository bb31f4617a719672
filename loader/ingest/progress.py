"""Where an ingestion run is: files read, chunks embedded out of the (estimated) total,
documents written, the embedding rate and the time left, from the run's progress events.

:class:`Tracker` is a :data:`~loader.ingest.report.ProgressCallback`: it counts the events
(``scanned`` with every file's size, ``file`` as each is read, ``embedded`` after every batch
of vectors, ``document`` as each is committed) and :meth:`Tracker.line` says where the run is.
Until every file is read, the chunks still to come are estimated from the bytes still to read
at the rate of chunks per byte so far ("~" before the total); the time left is those chunks at
the embedding rate of the last minute. Shown by the command line (:mod:`loader.cli.progress`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

RATE_WINDOW = 60.0
"""Seconds of embedding the rate is measured over."""


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Tracker:
    """Counts a run's progress events; thread-safe (the display reads from another thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.files = 0
        self.files_read = 0
        self.bytes_total = 0
        self.bytes_read = 0
        self.chunks_found = 0
        """Chunks of the new and changed files read so far (each embedded or reused)."""
        self.chunks_embedded = 0
        self.chunks_reused = 0
        self.documents = 0
        self.waiting: str | None = None
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._lock = threading.Lock()

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        with self._lock:
            if event == "scanned":
                self.files = len(info["files"])
                self.bytes_total = int(info.get("bytes", 0))
            elif event == "waiting":
                self.waiting = str(info["holder"])
            elif event == "file":
                self.waiting = None
                self.files_read += 1
                self.bytes_read += int(info.get("bytes", 0))
                self.chunks_found += int(info.get("chunks", 0))
            elif event == "embedded":
                count = int(info["count"])
                self.chunks_embedded += count
                self.chunks_reused += int(info.get("reused", 0))
                if count:
                    self._recent.append((self.clock(), count))
            elif event == "document":
                self.documents += 1

    @property
    def done(self) -> int:
        """Chunks with their vector: embedded now, or reused from an unchanged chunk."""
        return self.chunks_embedded + self.chunks_reused

    def estimated_total(self) -> tuple[int, bool]:
        """The chunks of the run (found, plus those the unread bytes should hold), and
        whether that is exact (every file read)."""
        if self.files_read >= self.files or self.bytes_read <= 0:
            return self.chunks_found, self.files_read >= self.files
        rest = max(0, self.bytes_total - self.bytes_read) * self.chunks_found / self.bytes_read
        return self.chunks_found + round(rest), False

    def rate(self) -> float | None:
        """Chunks embedded per second over the last :data:`RATE_WINDOW` seconds (since the
        first batch, when younger), None before two batches."""
        now = self.clock()
        while len(self._recent) > 2 and now - self._recent[0][0] > RATE_WINDOW:
            self._recent.popleft()
        if len(self._recent) < 2:
            return None
        span = now - self._recent[0][0]
        count = sum(c for _, c in list(self._recent)[1:])
        return count / span if span > 0 else None

    def fraction(self) -> float:
        """How much of the run is done, 0 to 1 (by chunks; by files before any chunk)."""
        total, _ = self.estimated_total()
        if total:
            return min(1.0, self.done / total)
        return self.files_read / self.files if self.files else 0.0

    def line(self) -> str:
        """``412/1169 files read, 6,120/~19,800 chunks embedded (5.2/s), 398 documents
        written, about 44 min left``."""
        with self._lock:
            if self.waiting:
                return f"waiting for the ingestion lock ({self.waiting} holds it)"
            total, exact = self.estimated_total()
            parts = [f"{self.files_read}/{self.files} files read"]
            of = f"{total:,}" if exact else (f"~{total:,}" if self.chunks_found else "?")
            shown = f"{self.done:,}/{of} chunks embedded"
            rate = self.rate()
            if rate is not None:
                shown += f" ({rate:.1f}/s)"
            parts.append(shown)
            if self.chunks_reused:
                parts[-1] += f", {self.chunks_reused:,} of them reused"
            parts.append(f"{self.documents:,} document{'' if self.documents == 1 else 's'} written")
            if rate and total > self.done:
                parts.append(f"about {_duration((total - self.done) / rate)} left")
            return ", ".join(parts)

    def elapsed(self) -> str:
        return _duration(self.clock() - self.started)
