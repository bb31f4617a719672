"""``pgkb ingest PATH --watch``: folders kept in sync as they change (watchfiles: inotify on
Linux, FSEvents on macOS, polling where neither works).

First a whole run over the paths (the usual ingest, with ``--prune`` when given), then, for
every burst of changes:

1. **Coalesce.** Changes are collected until the folder has been quiet for
   :data:`QUIET_MS` (at most :data:`MAX_WAIT_MS` from the first), so an editor's atomic save
   (a temporary file written, then renamed over the original), a ``git checkout`` or a copy of
   many files is one batch. Each path is then judged by what is on disk *now*, not by the
   events: a temporary file that came and went is nothing; a file replaced by a rename is a
   changed file.
2. **Ingest what exists**: the changed and new files (and folders moved in) go through
   :func:`loader.ingest.pipeline.ingest_paths`: unchanged bytes are skipped by their hash, a
   changed document is replaced in one transaction, unchanged chunks keep their embeddings.
3. **Remove what is gone** with ``--prune``'s safety: only documents whose file is certainly
   gone (``lstat`` says not found), never under a folder that cannot be read, and never more
   than ``prune_max_fraction`` of the documents under the watched paths in one batch without
   ``--force`` (an unmounted disk looks like deleted files): such a batch removes nothing and
   says why.

A batch that fails (the database away, the embeddings API down) keeps its paths pending and is
tried again with the next change or after :data:`RETRY_S` seconds. SIGTERM or SIGINT stop the
watcher after the batch in progress: every document is written whole or not at all, as in any
run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from loader.db import queries
from loader.db.session import connection
from loader.errors import ConfigError, PgkbError
from loader.filters import DEFAULT_COLLECTION
from loader.ingest.extract import mime_type
from loader.ingest.pipeline import ingest_paths
from loader.ingest.report import IngestReport
from loader.ingest.sources import SourceNames
from loader.ingest.writer import INGEST, _is_gone, ingest_lock, replaced_folders_note
from loader.providers.embeddings import Embedder, get_embedder
from loader.settings import Settings

log = logging.getLogger(__name__)

QUIET_MS = 400
"""A batch is handled once no change came for this long..."""
MAX_WAIT_MS = 1500
"""... or this long after its first change, whichever comes first."""
RETRY_S = 30.0
"""A failed batch is tried again after this long when nothing else changes."""

Report = Callable[[dict[str, Any]], None]
"""Receives one summary per run: the first one, then one per batch (``pgkb ingest --json``
prints each as a JSON line)."""


@dataclasses.dataclass
class Batch:
    """What one burst of changes asks for, judged by the disk after the burst."""

    present: set[Path] = dataclasses.field(default_factory=set)
    gone: set[Path] = dataclasses.field(default_factory=set)
    replaced: set[Path] = dataclasses.field(default_factory=set)
    """Paths that exist and are no folder: one may have been a folder, whose documents are gone
    (a folder moved away and a file made at its name)."""

    def add(self, path: Path) -> None:
        if os.path.lexists(path):
            self.gone.discard(path)
            is_dir = path.is_dir()
            if is_dir or mime_type(path) is not None:
                self.present.add(path)
            if is_dir:
                self.replaced.discard(path)
            else:
                self.replaced.add(path)
        else:
            self.present.discard(path)
            self.replaced.discard(path)
            self.gone.add(path)

    def merge(self, older: Batch) -> None:
        """Take back the paths of ``older`` (a batch that failed) that no newer change judged."""
        judged = self.present | self.gone | self.replaced
        self.present |= older.present - judged
        self.gone |= older.gone - judged
        self.replaced |= older.replaced - judged

    def __bool__(self) -> bool:
        return bool(self.present or self.gone or self.replaced)


def folder_identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the folder at ``path``, or None when no folder is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class _Either:
    """Set when either event is (what watchfiles' ``stop_event`` asks for: ``is_set()``)."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.first.is_set() or self.second.is_set()


def _hidden(path: Path, roots: Sequence[Path]) -> bool:
    """Hidden files and folders are skipped by ingest: their changes are ignored too (editors'
    swap and backup files among them)."""
    for root in roots:
        if path == root or path.is_relative_to(root):
            parts = path.relative_to(root).parts if root.is_dir() else ()
            return any(p.startswith(".") for p in parts)
    return path.name.startswith(".")


class Watcher:
    """The watch loop over ``paths``; :meth:`run` returns when :attr:`stop` is set."""

    def __init__(
        self,
        settings: Settings,
        paths: Sequence[str | os.PathLike[str]],
        *,
        category: str | None = None,
        meta: dict[str, str] | None = None,
        collection: str = DEFAULT_COLLECTION,
        prune: bool = False,
        force: bool = False,
        report: Report | None = None,
        embedder: Embedder | None = None,
        quiet_ms: int = QUIET_MS,
        max_wait_ms: int = MAX_WAIT_MS,
    ) -> None:
        self.settings = settings
        self.paths = [Path(p).expanduser().absolute() for p in paths]
        for path in self.paths:
            if not path.exists():
                raise ConfigError(f"{path} does not exist", hint="--watch follows existing paths")
        self.roots = [p.resolve() for p in self.paths]
        self.category, self.meta, self.collection = category, dict(meta or {}), collection
        self.prune, self.force = prune, force
        self.report = report or (lambda data: None)
        self.embedder = embedder
        self.quiet_ms, self.max_wait_ms = quiet_ms, max_wait_ms
        self.names = SourceNames.for_root(settings.source_root)
        self.folders = {p: folder_identity(p) for p in self.paths if p.is_dir()}
        """Each watched folder's identity: one that goes is reported, and watched again when a
        folder is back at its path."""
        self.lost: set[Path] = set()
        self.stop = threading.Event()
        self.pending = Batch()
        self.changes: queue.Queue[set[tuple[Any, str]] | Exception | None] = queue.Queue()

    # -- one run --------------------------------------------------------------------------------

    def _ingest(self, paths: Iterable[Path], *, prune: bool = False) -> IngestReport:
        return ingest_paths(
            self.settings,
            sorted(paths),
            category=self.category,
            meta=self.meta,
            prune=prune,
            force=self.force,
            embedder=self.embedder,
            collection=self.collection,
        )

    def first_run(self) -> IngestReport:
        """The whole paths, once, as ``pgkb ingest`` would (with --prune when asked)."""
        self.embedder = self.embedder or get_embedder(self.settings)
        report = self._ingest(self.paths, prune=self.prune)
        self.report({"event": "initial", **report.to_dict()})
        return report

    def handle(self, batch: Batch) -> dict[str, Any]:
        """Ingest what is present, remove what is gone; the batch's summary. A run-level
        failure raises :class:`PgkbError` (the caller keeps the batch pending)."""
        started = time.perf_counter()
        data: dict[str, Any] = {"event": "batch"}
        present, leaving = self._inside(batch.present)
        if present:
            report = self._ingest(present)
            if report.aborted:
                raise PgkbError(report.aborted, hint=report.hint)
            data.update(report.to_dict())
        else:
            data.update(IngestReport().to_dict())
        if leaving:
            data["failed"] = [*data.get("failed", []), *leaving]
            data["exit_code"] = max(int(data.get("exit_code") or 0), 1)
        removed, refused, notes = self.remove(batch.gone | batch.replaced)
        data["pruned"] = data.get("pruned", 0) + len(removed)
        data["removed"] = removed
        if notes:
            data["notes"] = [*data.get("notes", []), *notes]
        if refused:
            data["failed"] = [*data.get("failed", []), refused]
            data["exit_code"] = 1
        data["seconds"] = {
            **data.get("seconds", {}),
            "total": round(time.perf_counter() - started, 3),
        }
        return data

    def _inside(self, paths: Iterable[Path]) -> tuple[set[Path], list[dict[str, str]]]:
        """The changed paths that lie within the watched paths once links are resolved, and a
        failure for each other one: a link made in a watched folder to a file or folder outside
        it is not followed (``pgkb ingest DIR`` refuses it too), else anyone who may write in
        the folder could have any file the watcher can read ingested."""
        kept: set[Path] = set()
        leaving: list[dict[str, str]] = []
        for path in paths:
            try:
                real = path.resolve(strict=True)
            except (OSError, RuntimeError):  # gone, a loop or a dead link: the scan reports it
                kept.add(path)
                continue
            if path in self.paths or any(real == r or real.is_relative_to(r) for r in self.roots):
                kept.add(path)
                continue
            reason = (
                f"symbolic link to {real}, outside the watched "
                f"{'folder' if len(self.roots) == 1 else 'paths'} "
                f"{', '.join(map(str, self.roots))}: not ingested (give that path to ingest it)"
            )
            log.warning("failed: %s: %s", path, reason)
            leaving.append({"source": str(path), "reason": reason})
        return kept, leaving

    # -- removals -------------------------------------------------------------------------------

    def remove(self, gone: Iterable[Path]) -> tuple[list[str], dict[str, str] | None, list[str]]:
        """Delete the documents of files (or folders) that are certainly gone, with --prune's
        safety; returns the removed source_uris, why the fraction guard refused (or None), and
        notes (a folder that became a file, named). ``gone`` may hold paths that exist as a file
        now: what was stored *under* them (a folder there before) is gone. Nothing under a
        watched folder that is itself gone is removed (an unmounted disk): it is ingested again
        when the folder is back."""
        gone = [
            p
            for p in gone
            if (not os.path.lexists(p) or not p.is_dir())
            and not any(p == f or p.is_relative_to(f) for f in self.lost)
        ]
        if not gone:
            return [], None, []
        with connection(self.settings) as conn, ingest_lock(conn, what=INGEST):
            doomed: dict[str, str] = {}
            for path in gone:
                uri = self._uri(path)
                if uri is None:
                    continue
                rows = conn.execute(
                    queries.SOURCE_URIS_LIKE, (_like_exact_or_under(uri), self.collection)
                ).fetchall()
                for (stored,) in rows:
                    under = stored == uri or stored.startswith(uri.rstrip("/") + "/")
                    where = str(self.names.path(stored))
                    if under and _is_gone(where):
                        doomed[stored] = where
            total = 0
            for root in (r for r in self.roots if r.is_dir()):
                under = conn.execute(
                    queries.SOURCE_URIS_LIKE, (self.names.like_prefix(root), self.collection)
                ).fetchall()
                total += len(under)
            conn.commit()
            if not doomed:
                return [], None, []
            limit = self.settings.prune_max_fraction * max(total, len(doomed))
            if not self.force and len(doomed) > limit:
                reason = (
                    f"removal refused: {len(doomed)} of the {total} documents under the watched "
                    f"folders are gone at once (more than prune_max_fraction = "
                    f"{self.settings.prune_max_fraction:g}); check that the folder is mounted "
                    "and complete, then run `pgkb ingest PATH --prune --force` to delete them"
                )
                log.error("%s", reason)
                notes = replaced_folders_note(doomed.values(), "kept (removal refused)")
                where = ", ".join(str(r) for r in self.roots)
                return [], {"source": where, "reason": reason}, notes
            with conn.transaction():
                conn.execute(queries.DELETE_DOCUMENTS, (sorted(doomed), self.collection))
        for uri in sorted(doomed):
            log.info("removed: %s", uri)
        notes = replaced_folders_note(doomed.values(), "removed")
        for note in notes:
            log.warning("watch: %s", note)
        return sorted(doomed), None, notes

    def _uri(self, path: Path) -> str | None:
        """The source_uri a (gone) path had, resolved through its folder (which still exists);
        None when it is not under a watched folder (as --prune, the watcher removes only what
        was under a folder it was given) or not under the source root."""
        resolved = path.parent.resolve() / path.name
        if not any(r.is_dir() and resolved.is_relative_to(r) and resolved != r for r in self.roots):
            return None
        try:
            return self.names.uri(resolved)
        except ValueError:  # outside the source root: never ingested under it
            return None

    # -- the loop -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching (on a thread of its own) before the first run, so a change made while
        the first run works is not missed. Watches the paths that exist (all of them at first;
        after a watched folder went, the others, until it is back)."""
        paths = [p for p in self.paths if os.path.lexists(p) and p not in self.lost]
        self._thread_stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not paths:
            return
        ready = threading.Event()
        thread = threading.Thread(
            target=self._watch, args=(ready, paths, self._thread_stop), name="pgkb-watch",
            daemon=True,
        )  # fmt: skip
        thread.start()
        ready.wait(10)
        self._thread = thread

    def _restart(self) -> None:
        """Watch again from scratch: the watch of a folder that went follows nothing more (its
        inotify watch went with it), and a folder back at the same path is a new one."""
        self._thread_stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.start()

    def _watch(self, ready: threading.Event, paths: list[Path], own: threading.Event) -> None:
        import watchfiles

        def wanted(change: watchfiles.Change, raw: str) -> bool:
            return not _hidden(Path(raw), self.roots)

        changes = watchfiles.watch(
            *paths,
            watch_filter=wanted,
            debounce=self.max_wait_ms,
            step=self.quiet_ms,
            stop_event=_Either(self.stop, own),
            rust_timeout=500,
            yield_on_timeout=True,
            raise_interrupt=False,
        )
        try:
            for found in changes:
                ready.set()  # the first (timeout) yield: the watch is in place
                if found:
                    self.changes.put(found)
        except Exception as exc:  # the folder vanished, the inotify limit reached, ...
            if not own.is_set():
                log.error("watch: the watch stopped: %s", exc)
                self.changes.put(exc)
        finally:
            ready.set()
            if not own.is_set():  # replaced by a new watch: the loop goes on
                self.changes.put(None)

    def check_folders(self) -> None:
        """A watched folder that went (deleted, moved away, unmounted) is reported once, as an
        ``error`` event with exit code 2 (its documents are kept); one back at its path (or
        another folder put there) is watched again and ingested whole (with --prune's
        removals), as a ``resumed`` event."""
        changed, back = False, []
        for path, known in self.folders.items():
            now = folder_identity(path)
            if now is None:
                if path not in self.lost:
                    self.lost.add(path)
                    changed = True
                    message = (
                        f"the watched folder {path} is gone (deleted, moved away or "
                        "unmounted): its documents are kept, and it is watched again when a "
                        "folder is back at that path"
                    )
                    log.error("watch: %s", message)
                    self.report(
                        {"event": "error", "error": message, "folder": str(path),
                         "hint": "put the folder back (or mount it); pgkb picks it up",
                         "exit_code": 2}
                    )  # fmt: skip
            elif now != known or path in self.lost:
                self.folders[path] = now
                self.lost.discard(path)
                changed = True
                back.append(path)
        if changed:
            self._restart()
        for path in back:
            log.warning("watch: the folder %s is back: ingesting it whole", path)
            try:
                report = self._ingest([path], prune=self.prune)
            except PgkbError as exc:
                self.pending.present.add(path)
                self.report(
                    {"event": "error", "error": exc.message, "hint": exc.hint, "exit_code": 2,
                     "pending": [str(path)]}
                )  # fmt: skip
                continue
            self.report({"event": "resumed", "folder": str(path), **report.to_dict()})

    def run(self) -> None:
        """Handle the batches of changes until :attr:`stop` is set; each batch's summary goes to
        ``report`` (a failed batch: an ``error`` event, its paths kept for the next try)."""
        if not hasattr(self, "_thread"):
            self.start()
        last_try = time.monotonic()
        while not self.stop.is_set():
            try:
                found = self.changes.get(timeout=0.5)
            except queue.Empty:
                found = set()
            self.check_folders()
            if found is None:
                if self.lost and not self.stop.is_set():  # every watched path went: wait
                    continue
                return
            if isinstance(found, Exception):
                if self.lost:  # a watched folder went: reported above, watched again
                    continue
                raise PgkbError(
                    f"the watch of {', '.join(map(str, self.paths))} stopped: {found}",
                    hint="on Linux, raise fs.inotify.max_user_watches for large trees",
                )
            for _change, raw in found:
                self.pending.add(Path(raw))
            if not self.pending or (not found and time.monotonic() - last_try < RETRY_S):
                continue
            batch, self.pending = self.pending, Batch()
            last_try = time.monotonic()
            try:
                self.report(self.handle(batch))
            except PgkbError as exc:
                self.pending.merge(batch)
                log.error("watch: %s", exc.message)
                self.report(
                    {"event": "error", "error": exc.message, "hint": exc.hint, "exit_code": 2,
                     "pending": sorted(str(p) for p in batch.present | batch.gone)}
                )  # fmt: skip

    def stop_on_signals(self) -> None:
        """SIGTERM and SIGINT stop the loop after the batch in progress."""

        def handler(signum: int, frame: FrameType | None) -> None:
            log.warning("watch: %s received, stopping", signal.Signals(signum).name)
            self.stop.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def _like_exact_or_under(uri: str) -> str:
    """A LIKE pattern matching ``uri`` and everything under it (filtered exactly afterwards)."""
    escaped = uri.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
