"""What an ingestion run did (the ``--json`` summary) and the progress events it reports."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

ProgressCallback = Callable[[str, dict[str, Any]], None]
"""``progress(event, info)``: events ``scanned`` (``files``, their total ``bytes``), ``file``
(each file read: ``source``, ``status`` unchanged or parsed, ``bytes``, ``chunks``),
``embedded`` (after every embedding call: ``count`` texts embedded; then once per written
batch: ``reused``, its chunks that needed no call), ``document`` (each document committed:
source, status, chunks), ``waiting`` (holder: the backend pid of the run holding the lock).
:class:`loader.ingest.progress.Tracker` turns them into where the run is."""


@dataclasses.dataclass
class IngestReport:
    """What a run did; ``to_dict()`` is the ``--json`` summary."""

    files_seen: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    pruned: int = 0
    failed: list[dict[str, str]] = dataclasses.field(default_factory=list)
    chunks_written: int = 0
    embeddings_computed: int = 0
    embeddings_reused: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    graph: dict[str, int] = dataclasses.field(default_factory=dict)
    """What the document graph gained (links, edges by origin; see loader.graph.store)."""
    index_rebuilt: bool = False
    """The model's HNSW index was dropped before this (bulk) load and built after it
    (``hnsw_bulk_threshold``; its build time is ``seconds["index"]``)."""
    aborted: str | None = None
    """Why the run stopped early (a run-level error), or None."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """What the run did not do and why, when it is no failure (only in the summary if any)."""
    hint: str | None = None
    """What to do about ``aborted``."""

    def fail(self, source: str, reason: str) -> None:
        self.failed.append({"source": source, "reason": reason})
        log.warning("failed: %s: %s", source, reason)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    @property
    def exit_code(self) -> int:
        """0 all went well, 1 some sources failed (the rest were ingested), 2 run aborted."""
        if self.aborted:
            return 2
        return 1 if self.failed else 0

    def merge(self, other: IngestReport) -> None:
        """Add ``other``'s counts, failures, times and notes to this report (``files_seen``
        stays this report's: the sources it looked at)."""
        for name in ("new", "changed", "unchanged", "pruned", "chunks_written",
                     "embeddings_computed", "embeddings_reused"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failed.extend(other.failed)
        self.notes.extend(other.notes)
        for key, seconds in other.seconds.items():
            self.seconds[key] = self.seconds.get(key, 0.0) + seconds
        for key, count in other.graph.items():
            self.graph[key] = self.graph.get(key, 0) + count
        self.index_rebuilt = self.index_rebuilt or other.index_rebuilt
        self.aborted, self.hint = self.aborted or other.aborted, self.hint or other.hint

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if not data["notes"]:
            del data["notes"]
        data["seconds"] = {k: round(v, 3) for k, v in self.seconds.items()}
        data["exit_code"] = self.exit_code
        if self.aborted:  # what every failed --json run prints: error and hint
            data["error"] = self.aborted
            data["hint"] = self.hint or "run again with -v to see what stopped it"
        return data
