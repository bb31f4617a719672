"""``pgkb worker``: the write queue's documents read, chunked, embedded and linked exactly as
``pgkb ingest`` reads files.

Services, people and agents submit documents with ``kb.submit_document`` (text),
``kb.submit_file`` (bytes and a MIME type) or ``kb.remove_document``; each is a job in
``kb.document_jobs``, pending from the moment the submitter's transaction commits. A worker takes
the next job with ``kb.claim_document_job`` (``FOR UPDATE SKIP LOCKED``: two workers never take
the same one; a lease that a killed worker's job comes back after), processes it through the
ingestion pipeline (:func:`loader.ingest.pipeline.ingest_documents`: the same extraction,
hashing, reuse of unchanged chunks and atomic replace) and ends it with
``kb.finish_document_job``: ready, failed with a sentence saying why (a file it cannot read,
text over the limits), or, for a failure that may pass (the embedding API's 5xx or timeout after
its retries, a lost database connection), pending again after a backoff that doubles at each
attempt, until ``worker_max_attempts``. Idle, it waits on the channel ``kb_document_jobs``
(``LISTEN``), so a submitted document starts at once, and polls every ``worker_poll_seconds`` all
the same (a notification can be lost with a connection).

Every job is also a run in ``kb.ingest_runs`` (source ``job:<id>``), so ``pgkb stats``, the
status page and ``pgkb doctor`` show it beside ``pgkb ingest``'s runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from loader.db import queries
from loader.db.session import connection
from loader.errors import PgkbError
from loader.ingest.extract import FORMATS, ExtractionError
from loader.ingest.pipeline import extract_bounded, ingest_documents, new_extractor
from loader.ingest.report import IngestReport
from loader.ingest.runs import record_run
from loader.ingest.sources import SourceDocument
from loader.ingest.worker import Extractor
from loader.providers.embeddings import Embedder, get_embedder
from loader.settings import Settings

log = logging.getLogger(__name__)

TEXT_TYPE = "text/markdown"
"""How submitted text is read: Markdown (plain text is Markdown without headings)."""


@dataclasses.dataclass
class WorkerReport:
    """What a worker did: jobs ready, failed for good, put back for later, and removals."""

    ready: int = 0
    failed: int = 0
    retried: int = 0
    removed: int = 0
    lost: int = 0
    """Jobs whose lease ran out while this worker held them (another worker took them)."""

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class PermanentFailure(PgkbError):
    """A job that will not succeed if tried again (an unreadable file, text over the limits)."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}"


class Worker:
    """Takes jobs from the queue until stopped (``stop``), or until it is empty (``once``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        name: str | None = None,
        on_job: Callable[[str, queries.DocumentJob, str | None], None] | None = None,
    ) -> None:
        self.settings = settings
        self._embedder = embedder
        self.name = name or worker_name()
        self.on_job = on_job
        self.report = WorkerReport()
        self._extractor: Extractor | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.settings)
        return self._embedder

    def run(self, *, once: bool = False, stop: threading.Event | None = None) -> WorkerReport:
        """Process jobs; with ``once``, return when no job is ready; else wait for more until
        ``stop`` is set. A lost database connection is retried (the job it held comes back
        after its lease)."""
        stop = stop or threading.Event()
        try:
            while not stop.is_set():
                try:
                    with connection(self.settings) as conn:
                        conn.autocommit = True
                        conn.execute(queries.LISTEN_DOCUMENT_JOBS)
                        if self._drain(conn, stop) and once:
                            return self.report
                        while not stop.is_set():
                            if self._drain(conn, stop) and once:
                                return self.report
                            self._wait(conn, stop)
                except psycopg.OperationalError as exc:
                    if once:
                        raise
                    log.warning(
                        "pgkb worker lost its database connection (%s); reconnecting",
                        str(exc).strip().splitlines()[0] if str(exc).strip() else exc,
                    )
                    stop.wait(self.settings.worker_poll_seconds)
        finally:
            if self._extractor is not None:
                self._extractor.close()
        return self.report

    def _wait(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        """Until a notification arrives, ``stop`` is set or ``worker_poll_seconds`` pass."""
        deadline = time.monotonic() + self.settings.worker_poll_seconds
        fd = conn.fileno()
        while not stop.is_set() and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], min(0.5, deadline - time.monotonic()))
            if ready:
                for _ in conn.notifies(timeout=0, stop_after=100):
                    pass
                return

    def _drain(self, conn: psycopg.Connection[Any], stop: threading.Event) -> bool:
        """Process every job ready now; True when the queue had none left."""
        while not stop.is_set():
            job = self.claim(conn)
            if job is None:
                return True
            self.process(conn, job)
        return False

    def claim(self, conn: psycopg.Connection[Any]) -> queries.DocumentJob | None:
        with conn.cursor(row_factory=class_row(queries.DocumentJob)) as cur:
            return cur.execute(
                queries.CLAIM_DOCUMENT_JOB,
                {"worker": self.name, "lease": self.settings.worker_lease_seconds},
            ).fetchone()

    def process(self, conn: psycopg.Connection[Any], job: queries.DocumentJob) -> str:
        """Do ``job`` and end it; returns the outcome (ready, failed, retry, lost)."""
        report = IngestReport()
        document_id = None
        error: str | None = None
        outcome = "ready"
        try:
            with record_run(conn, [f"job:{job.id} {job.action} {job.source_uri}"], report):
                if job.action == "remove":
                    self._remove(conn, job)
                else:
                    document_id = self._put(conn, job, report)
        except (PermanentFailure, ExtractionError) as exc:
            outcome, error = "failed", exc.message
        except psycopg.OperationalError:
            raise  # the connection is gone: the lease brings the job back
        except PgkbError as exc:
            outcome = "retry" if exc.transient else "failed"
            error = exc.message + (f" ({exc.hint})" if exc.hint else "")
        except Exception as exc:  # a bug on one document must not stop the worker
            log.exception("pgkb worker: job %s (%s) failed", job.id, job.source_uri)
            outcome, error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            if not conn.autocommit:
                conn.rollback()
                conn.autocommit = True
        if outcome == "retry" and job.attempts >= self.settings.worker_max_attempts:
            outcome = "failed"
            error = f"{error} (gave up after {job.attempts} attempts)"
        seconds = None
        if outcome == "retry":
            seconds = min(
                self.settings.worker_backoff_max,
                self.settings.worker_backoff_base * 2 ** (job.attempts - 1),
            )
        row = conn.execute(
            queries.FINISH_DOCUMENT_JOB,
            {"id": job.id, "worker": self.name, "outcome": outcome, "error": error,
             "seconds": seconds, "document_id": document_id},
        ).fetchone()  # fmt: skip
        if not (row and row[0]):
            self.report.lost += 1
            outcome = "lost"
        elif outcome == "ready":
            if job.action == "remove":
                self.report.removed += 1
            else:
                self.report.ready += 1
        elif outcome == "failed":
            self.report.failed += 1
        else:
            self.report.retried += 1
        if self.on_job is not None:
            self.on_job(outcome, job, error)
        return outcome

    def _remove(self, conn: psycopg.Connection[Any], job: queries.DocumentJob) -> None:
        conn.autocommit = False
        conn.execute(queries.REMOVE_DOCUMENTS, ([job.source_uri], None, None, False,
                                                [job.collection]))  # fmt: skip
        conn.commit()

    def _put(
        self, conn: psycopg.Connection[Any], job: queries.DocumentJob, report: IngestReport
    ) -> Any:
        data = job.data if job.data is not None else (job.content or "").encode("utf-8")
        mime = job.mime_type or TEXT_TYPE
        limit = self.settings.max_file_mb * 1024 * 1024
        if len(data) > limit:
            raise PermanentFailure(
                f"{job.source_uri}: {len(data) / 1024 / 1024:.1f} MB, over max_file_mb "
                f"({self.settings.max_file_mb:g} MB)"
            )
        readable = sorted(set(FORMATS.values()))
        if mime.split(";")[0].strip().lower() not in readable:
            raise PermanentFailure(
                f"unsupported file type {mime}; pgkb reads {', '.join(readable)}"
            )
        mime = mime.split(";")[0].strip().lower()
        name = PurePosixPath(job.source_uri.rstrip("/")).name or "document"
        if self._extractor is None:
            self._extractor = new_extractor(self.settings)
        extracted = extract_bounded(data, Path(name), mime, self._extractor)
        title = job.title or extracted.title or name
        metadata = {**extracted.metadata, **job.metadata, "submitted_by": job.submitted_by}
        doc = SourceDocument(
            job.source_uri, title, "", sections=list(extracted.sections),
            category=job.category, metadata=metadata,
        )  # fmt: skip
        conn.autocommit = False
        result = ingest_documents(
            conn, [doc], self.embedder, self.settings, collection=job.collection
        )
        report.merge(result)
        report.files_seen = result.files_seen
        if result.failed:
            raise PermanentFailure("; ".join(f["reason"] for f in result.failed))
        conn.autocommit = True
        row = conn.execute(queries.DOCUMENT_ID, (job.collection, job.source_uri)).fetchone()
        return row[0] if row else None


def submit(
    conn: psycopg.Connection[Any],
    source_uri: str,
    *,
    content: str | None = None,
    data: bytes | None = None,
    mime_type: str | None = None,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    category: str | None = None,
    collection: str = "default",
) -> Any:
    """``kb.submit_document`` (text) or ``kb.submit_file`` (bytes): the job's id."""
    params = {
        "source_uri": source_uri, "title": title, "metadata": Jsonb(metadata or {}),
        "category": category, "collection": collection,
    }  # fmt: skip
    if data is not None:
        row = conn.execute(
            queries.SUBMIT_FILE, {**params, "data": data, "mime_type": mime_type}
        ).fetchone()
    else:
        row = conn.execute(queries.SUBMIT_DOCUMENT, {**params, "content": content}).fetchone()
    assert row is not None
    return row[0]
