"""Bulk loads build the model's HNSW index once, after loading, rather than row by row.

Inserting a vector into an HNSW graph costs several times what building the graph from all the
vectors at once costs per vector (docs/measurements/hnsw-bulk.md). So a load
that writes at least ``hnsw_bulk_threshold`` embeddings of a model, and more than the model's
index already holds, drops the index first (``kb.drop_model_index``), writes, and builds it again
(``kb.build_model_index``: sized for the corpus the load leaves, ``kb.hnsw_parameters``, unless
the ``hnsw_m`` / ``hnsw_ef_construction`` settings are set or the dropped index was built with
explicit parameters, which are kept).

The decision is taken before each batch is written, from the count of embeddings the run will
have written once that batch is stored: ``pgkb models reembed`` knows its total before the first
batch and decides then; ingestion learns its count as documents are chunked and switches at the
batch that crosses the threshold (the rows already written are part of the rebuild).

Guarantees:

- searches keep working while the index is missing: ``kb.vector_search`` reads the model's
  rows by a sequential scan and returns the exact nearest neighbours;
- the rebuild runs in a ``finally``: a load that fails midway (an embedding API that gives up,
  a database error, Ctrl-C) still ends with the index built. Only a killed process (or a lost
  connection) can leave a model without its index; the next load of that model (``pgkb
  ingest``, even with nothing to change, or ``pgkb models reembed``, even with nothing to
  embed) finds it missing when it starts and builds it when it ends (with the ``hnsw_m`` and
  ``hnsw_ef_construction`` settings: the dropped index's own were lost with the process);
  meanwhile ``pgkb db doctor`` reports it, ``pgkb db reindex`` builds it and ``pgkb models
  activate`` refuses the model;
- the caller holds the ingestion advisory lock (``ingest_lock``), so no other load interleaves;
- ``DROP INDEX`` takes a brief exclusive lock on ``kb.embeddings``; ``kb.drop_model_index`` waits
  at most 5 s for it (a long transaction must not queue every search behind the drop), and when
  it is not granted the load goes on row by row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from loader.db import queries
from loader.errors import PgkbError
from loader.ingest.report import IngestReport
from loader.settings import Settings

log = logging.getLogger(__name__)


class BulkIndex:
    """Drops a model's HNSW index when a load turns out large, and rebuilds it in :meth:`finish`.

    ``existing``: the number of the model's embeddings stored before the load, when the caller
    knows it (``pgkb models reembed``); otherwise it is counted once, when the threshold is
    reached.
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        model_id: int,
        settings: Settings,
        *,
        existing: int | None = None,
        report: IngestReport | None = None,
    ) -> None:
        self.conn = conn
        self.model_id = model_id
        self.threshold = settings.hnsw_bulk_threshold
        self.hnsw = (settings.hnsw_m, settings.hnsw_ef_construction)
        self.existing = existing
        self.report = report
        self.planned = 0
        """Embeddings of the model this load has written or is about to write."""
        self.dropped: dict[str, Any] | None = None
        """What ``kb.drop_model_index`` returned (index name, m, ef_construction), while the
        index is dropped."""
        self.rebuilt = False
        self.was_missing = False
        """The index was missing when the load began (a killed load dropped it): built at the
        end."""
        self._settled = False  # row by row for the rest of the load (no index, lock refused)

    def check_missing(self) -> None:
        """Note whether the model's index is missing as the load begins (the caller holds the
        ingestion lock, so no other load has dropped it on purpose)."""
        row = self.conn.execute(queries.MODEL_INDEX_MISSING, (self.model_id,)).fetchone()
        self.conn.commit()
        if row is not None:
            self.was_missing = self._settled = True
            self.dropped = {"index": row[0], "m": self.hnsw[0], "ef_construction": self.hnsw[1]}
            log.warning(
                "the HNSW index %s is missing (a load was killed before building it again): it "
                "is built when this load ends",
                row[0],
            )

    def before_write(self, count: int) -> None:
        """``count`` more embeddings of the model are about to be written: drop the index now if
        the load has become a bulk load. Call it outside any open transaction."""
        self.planned += count
        if self.dropped is not None or self._settled or self.threshold == 0:
            return
        if self.planned < self.threshold:
            return
        if self.existing is None:  # stored before this load: now, minus what it wrote already
            row = self.conn.execute(queries.MODEL_EMBEDDING_COUNT, (self.model_id,)).fetchone()
            self.conn.commit()
            self.existing = max((int(row[0]) if row else 0) - (self.planned - count), 0)
        if self.planned <= self.existing:
            return  # a small addition to a large index: inserting beats rebuilding everything
        try:
            row = self.conn.execute(queries.DROP_MODEL_INDEX, (self.model_id,)).fetchone()
            self.conn.commit()
        except psycopg.errors.LockNotAvailable:
            self.conn.rollback()
            self._settled = True
            log.warning(
                "the HNSW index of model %s could not be dropped for a bulk load (another "
                "transaction holds kb.embeddings); loading row by row",
                self.model_id,
            )
            return
        if row is None or row[0] is None:  # no index (above 2,000 dims, or missing already)
            self._settled = True
            return
        self.dropped = dict(row[0])
        log.info(
            "bulk load: %d embeddings (%d stored before): dropped %s, it is built again after "
            "the load",
            self.planned,
            self.existing,
            self.dropped["index"],
        )

    def finish(self) -> None:
        """Build the dropped index again (nothing when it was not dropped). Raises
        :class:`PgkbError` when the build fails; the model then has no index until
        ``pgkb db reindex``."""
        if self.dropped is None:
            return

        conn = self.conn
        name = self.dropped["index"]
        log.info("building %s after the bulk load", name)
        try:
            if conn.info.transaction_status != TransactionStatus.IDLE:  # a failure left one open
                conn.rollback()
            if self.report is not None:
                with self.report.phase("index"):
                    self._build()
            else:
                self._build()
        except psycopg.Error as exc:
            diag = getattr(exc, "diag", None)
            reason = (diag.message_primary if diag else None) or str(exc)
            raise PgkbError(
                f"the HNSW index {name} of model {self.model_id} could not be built again after "
                f"the bulk load: {reason}; searches through the model are exact (slower) until "
                "it exists",
                hint="pgkb db reindex builds it (pgkb db doctor reports it meanwhile)",
            ) from exc
        self.dropped = None
        self.rebuilt = True
        if self.report is not None:
            self.report.index_rebuilt = True

    def _build(self) -> None:
        assert self.dropped is not None
        m, ef = self.hnsw
        m = m if m is not None else self.dropped.get("m")
        ef = ef if ef is not None else self.dropped.get("ef_construction")
        self.conn.execute(queries.BUILD_MODEL_INDEX, (self.model_id, m, ef))
        self.conn.commit()


@contextmanager
def bulk_index(
    conn: psycopg.Connection[Any],
    model_id: int,
    settings: Settings,
    *,
    existing: int | None = None,
    report: IngestReport | None = None,
) -> Iterator[BulkIndex]:
    """A :class:`BulkIndex` whose index, if dropped, is built again when the block ends, however
    it ends, and so is the index a killed load left missing. A failing rebuild after a failed
    load is logged and the load's error propagates."""
    bulk = BulkIndex(conn, model_id, settings, existing=existing, report=report)
    bulk.check_missing()
    try:
        yield bulk
    except BaseException:
        try:
            bulk.finish()
        except Exception:
            log.error("after the failed load, the HNSW index could not be rebuilt", exc_info=True)
        raise
    bulk.finish()
