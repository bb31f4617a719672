"""The write queue (kb.document_jobs): submissions and removals, and the worker's claims."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

SUBMIT_DOCUMENT = (
    "SELECT kb.submit_document(%(source_uri)s, %(title)s, %(content)s, %(metadata)s, "
    "%(category)s, %(collection)s)"
)
SUBMIT_FILE = (
    "SELECT kb.submit_file(%(source_uri)s, %(data)s, %(mime_type)s, %(title)s, %(metadata)s, "
    "%(category)s, %(collection)s)"
)
REMOVE_DOCUMENT = "SELECT kb.remove_document(%(source_uri)s, %(collection)s)"
DOCUMENT_JOBS = "SELECT * FROM kb.document_jobs(%(state)s, %(limit)s, %(job_id)s)"
CLAIM_DOCUMENT_JOB = "SELECT * FROM kb.claim_document_job(%(worker)s, %(lease)s)"
FINISH_DOCUMENT_JOB = (
    "SELECT kb.finish_document_job(%(id)s, %(worker)s, %(outcome)s, %(error)s, %(seconds)s, "
    "%(document_id)s)"
)
DOCUMENT_ID = "SELECT id FROM kb.documents WHERE collection = %s AND source_uri = %s"
LISTEN_DOCUMENT_JOBS = "LISTEN kb_document_jobs"
CAN_CLAIM_JOBS = "SELECT has_function_privilege('kb.claim_document_job(text, integer)', 'EXECUTE')"
"""Whether the role may take jobs from the queue (a loader: ``pgkb db grant ROLE --write``)."""
QUEUE_STATE = """
SELECT count(*) FILTER (WHERE state = 'pending') AS pending,
       count(*) FILTER (WHERE state = 'processing') AS processing,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       extract(epoch FROM clock_timestamp() - min(submitted_at) FILTER (WHERE state = 'pending'))
           AS oldest_pending_seconds
  FROM kb.document_jobs(NULL, 1000, NULL)
"""
"""The queue as the caller may see it (its collections; the newest 1,000 jobs)."""


@dataclasses.dataclass(frozen=True)
class DocumentJob:
    """A row of kb.document_jobs as a worker claims it (with the submitted text or bytes)."""

    id: uuid.UUID
    action: str
    collection: str
    source_uri: str
    title: str | None
    content: str | None
    data: bytes | None
    mime_type: str | None
    metadata: dict[str, Any]
    category: str | None
    content_sha: str
    state: str
    attempts: int
    error: str | None
    submitted_by: str
    submitted_at: datetime.datetime
    run_after: datetime.datetime
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    lease_until: datetime.datetime | None
    worker: str | None
    document_id: uuid.UUID | None


@dataclasses.dataclass(frozen=True)
class JobState:
    """A row of kb.document_jobs() (what anyone who may read the collection sees)."""

    id: uuid.UUID
    action: str
    collection: str
    source_uri: str
    title: str | None
    mime_type: str | None
    category: str | None
    state: str
    attempts: int
    error: str | None
    submitted_by: str
    submitted_at: datetime.datetime
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    run_after: datetime.datetime
    document_id: uuid.UUID | None
    chunks: int

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key, value in data.items():
            if isinstance(value, uuid.UUID | datetime.datetime):
                data[key] = (
                    value.isoformat() if isinstance(value, datetime.datetime) else str(value)
                )
        return data


@dataclasses.dataclass(frozen=True)
class QueueState:
    """The queue as :data:`QUEUE_STATE` reads it: jobs by state, and how long the oldest pending
    one has waited (None: none pending)."""

    pending: int
    processing: int
    failed: int
    oldest_pending_seconds: float | None
