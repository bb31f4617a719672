"""The ingestion run log (``kb.ingest_runs``): one row per run, written around the run.

``record_run`` is the hook ``loader.ingest.pipeline`` wraps a run in: it calls
``kb.ingest_run_begin`` when the run starts and ``kb.ingest_run_end`` with the run's summary when
it ends, also when the run raised (exit code 2 and the error), so ``pgkb stats`` can show what
the scheduler did.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from loader.db import queries
from loader.ingest.report import IngestReport

log = logging.getLogger(__name__)


def _reset(conn: psycopg.Connection[Any]) -> None:

    if conn.info.transaction_status != TransactionStatus.IDLE:
        conn.rollback()


@contextmanager
def record_run(
    conn: psycopg.Connection[Any], paths: Sequence[str | os.PathLike[str]], report: IngestReport
) -> Iterator[None]:
    """Record the run in ``kb.ingest_runs``: start now, end (from ``report.to_dict()``) after the
    block, or exit code 2 with the error when the block raises (the error propagates)."""
    _reset(conn)
    row = conn.execute(queries.INGEST_RUN_BEGIN, ([os.fspath(p) for p in paths],)).fetchone()
    conn.commit()
    assert row is not None  # kb.ingest_run_begin returns the new run id
    run_id = int(row[0])
    try:
        yield
    except BaseException as exc:
        data = report.to_dict()
        data["exit_code"] = 130 if isinstance(exc, KeyboardInterrupt) else 2
        data["aborted"] = str(exc) or type(exc).__name__
        _finish(conn, run_id, data)
        raise
    _finish(conn, run_id, report.to_dict())


def _finish(conn: psycopg.Connection[Any], run_id: int, data: dict[str, Any]) -> None:
    try:
        _reset(conn)
        conn.execute(queries.INGEST_RUN_END, (run_id, json.dumps(data, default=str)))
        conn.commit()
    except Exception as exc:  # the connection died with the run: the row keeps finished_at NULL
        # one line, no traceback: the run's own error is what the user must read
        log.warning("could not record the end of ingestion run %s: %s", run_id, exc)
