"""The database side of ingestion: the run's advisory lock, stored hashes, and the writer that
embeds prepared documents in shared batches and replaces each in its own transaction."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from loader.db import queries
from loader.errors import PgkbError
from loader.filters import DEFAULT_COLLECTION
from loader.graph.links import Link
from loader.graph.store import GraphWriter
from loader.ingest.bulk_index import BulkIndex
from loader.ingest.chunking import Chunk
from loader.ingest.report import IngestReport, ProgressCallback
from loader.ingest.sources import Scan, SourceNames
from loader.providers.embeddings import Embedder
from loader.settings import Settings

log = logging.getLogger(__name__)

INGEST_LOCK_KEY = 0x70676B62_00000001
"""The advisory lock every ingestion run holds ('pgkb' + 1)."""


@dataclasses.dataclass
class Prepared:
    """A source, parsed and chunked, waiting for its vectors and its transaction."""

    source_uri: str
    title: str
    content_sha: str
    category: str | None
    metadata: dict[str, Any]
    chunks: list[Chunk]
    is_new: bool
    links: list[Link] = dataclasses.field(default_factory=list)


def json_default(value: Any) -> str:
    return str(value)


# --- the writer ---------------------------------------------------------------------------------

_PER_DOCUMENT_ERRORS: tuple[type[Exception], ...] = (
    psycopg.DataError,  # NUL characters, bad encodings, values out of range
    psycopg.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,  # e.g. a tsvector or row beyond PostgreSQL's limits
)
"""Errors the database raises about one document's values (not about the connection)."""


def database_refusal(exc: Exception, prepared: Prepared) -> str:
    """A per-document failure reason from a database error: its message and detail, and why
    when the document's own values hold a NUL character (read from the values, not the message)."""
    diag = getattr(exc, "diag", None)
    primary = (diag.message_primary if diag else None) or str(exc).strip().splitlines()[0]
    detail = diag.message_detail if diag else None
    reason = "the database refused it: " + primary + (f" ({detail})" if detail else "")
    if _holds_nul(dataclasses.astuple(prepared)):
        reason += "; it holds a NUL character, which PostgreSQL text cannot store"
    return reason


def _holds_nul(value: object) -> bool:
    """Whether a text anywhere in ``value`` (strings, and lists, tuples and dicts of them, keys
    included) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(v) for v in value)
    return False


class Writer:
    """Embeds prepared documents in shared batches and writes each in its own transaction."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        embedder: Embedder,
        model_id: int,
        batch_size: int,
        report: IngestReport,
        progress: ProgressCallback | None,
        bulk: BulkIndex | None = None,
        *,
        collection: str = DEFAULT_COLLECTION,
        graph_across_collections: bool = False,
    ) -> None:
        self.conn = conn
        self.collection = collection
        """The collection every document of the run is written into."""
        self.bulk = bulk
        """Told how many embeddings each batch writes, before it writes them (it may drop the
        model's HNSW index for a bulk load; see :mod:`loader.ingest.bulk_index`)."""
        self.embedder = embedder
        self.model_id = model_id
        self.batch_size = batch_size
        self.report = report
        self.progress = progress
        self.pending: list[Prepared] = []
        self.pending_texts = 0
        self.graph = GraphWriter(None if graph_across_collections else collection)
        self._staged: bool | None = None

    def finish_graph(self, settings: Settings) -> None:
        """The graph's end-of-run work (mentions, chat-model metadata and edges)."""
        self.report.graph = self.graph.finish(self.conn, settings).to_dict()
        self.report.seconds["graph"] = self.graph.seconds

    def add(self, prepared: Prepared) -> None:
        self.pending.append(prepared)
        self.pending_texts += len(prepared.chunks)
        if self.pending_texts >= self.batch_size * 4 or len(self.pending) >= 256:
            self.flush()

    def _reusable(self, shas: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for start in range(0, len(shas), 5000):
            rows = self.conn.execute(
                queries.REUSABLE_EMBEDDINGS,
                (self.model_id, shas[start : start + 5000]),
            ).fetchall()
            found.update({sha: vector for sha, vector in rows})
        self.conn.commit()
        return found

    def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending, self.pending_texts = self.pending, [], 0
        shas = sorted({c.content_sha for p in batch for c in p.chunks})
        with self.report.phase("embed"):
            vectors = self._reusable(shas)
            reused_shas = set(vectors)
            missing: dict[str, str] = {}
            for prepared in batch:
                for chunk in prepared.chunks:
                    if chunk.content_sha not in vectors:
                        missing.setdefault(chunk.content_sha, chunk.embed_text)
            chunks = sum(len(p.chunks) for p in batch)
            for part in self._batches(missing):
                texts = [missing[sha] for sha in part]
                computed = self.embedder.embed(texts)
                if len(computed) != len(texts):
                    raise PgkbError(
                        f"the embedding model {self.embedder.name} returned {len(computed)} "
                        f"vectors for {len(texts)} texts"
                    )
                for sha, vector in zip(part, computed, strict=True):
                    if len(vector) != self.embedder.dims:
                        raise PgkbError(
                            f"the embedding model {self.embedder.name} returned a "
                            f"{len(vector)}-dimensional vector, expected {self.embedder.dims}"
                        )
                    vectors[sha] = vector
                self.report.embeddings_computed += len(texts)
                if self.progress:
                    self.progress("embedded", {"count": len(texts), "reused": 0})
            for prepared in batch:
                self.report.embeddings_reused += sum(
                    1 for c in prepared.chunks if c.content_sha in reused_shas
                )
            if self.progress:  # the batch's other chunks: reused, or repeating a text
                self.progress("embedded", {"count": 0, "reused": chunks - len(missing)})
        if self.bulk is not None:
            self.bulk.before_write(sum(len(p.chunks) for p in batch))
        with self.report.phase("write"):
            for prepared in batch:
                try:
                    self._write(prepared, vectors)
                except _PER_DOCUMENT_ERRORS as exc:
                    # its transaction rolled back: the stored version (if any) stays, and the
                    # run goes on with the other documents
                    self.report.fail(prepared.source_uri, database_refusal(exc, prepared))

    def _batches(self, missing: dict[str, str]) -> list[list[str]]:
        """The shas of ``missing`` in embedding calls of ``batch_size`` texts, texts of similar
        length together (less padding), each call reported as it returns."""
        ordered = sorted(missing, key=lambda sha: len(missing[sha]))
        size = max(1, self.batch_size)
        return [ordered[i : i + size] for i in range(0, len(ordered), size)]

    def _staging(self) -> bool:
        """Whether rows go through temporary staging tables: for a writer that row-level
        security applies to (not the owner), since PostgreSQL refuses COPY into such a table;
        the owner copies straight into kb.chunks and kb.embeddings."""
        if self._staged is None:
            row = self.conn.execute(queries.ROW_SECURITY_ACTIVE).fetchone()
            self._staged = bool(row and row[0])
        if self._staged:  # in each document's transaction: a rolled back one takes it along
            self.conn.execute(queries.CREATE_STAGING)
        return self._staged

    def _write(self, prepared: Prepared, vectors: dict[str, Any]) -> None:
        conn = self.conn
        with conn.transaction():
            row = conn.execute(
                queries.UPSERT_DOCUMENT,
                (
                    prepared.source_uri,
                    prepared.title,
                    prepared.content_sha,
                    prepared.category,
                    json.dumps(prepared.metadata, default=json_default, ensure_ascii=False),
                    self.collection,
                ),
            ).fetchone()
            assert row is not None
            document_id = row[0]
            conn.execute(queries.DELETE_CHUNKS, (document_id,))
            staged = self._staging()
            with conn.cursor().copy(
                queries.COPY_CHUNKS_STAGED if staged else queries.COPY_CHUNKS
            ) as copy:
                copy.set_types(["uuid", "int4", "text", "text", "text", "int4"])
                for chunk in prepared.chunks:
                    copy.write_row(
                        (
                            document_id,
                            chunk.index,
                            chunk.heading_path,
                            chunk.content,
                            chunk.content_sha,
                            chunk.token_count,
                        )
                    )
            if staged:
                conn.execute(queries.INSERT_STAGED_CHUNKS)
            ids = dict(conn.execute(queries.CHUNK_IDS, (document_id,)).fetchall())
            with conn.cursor().copy(
                queries.COPY_EMBEDDINGS_STAGED if staged else queries.COPY_EMBEDDINGS
            ) as copy:
                copy.set_types(["int8", "int4", "vector"])
                for chunk in prepared.chunks:
                    copy.write_row(
                        (ids[chunk.index], self.model_id, _as_vector(vectors[chunk.content_sha]))
                    )
            if staged:
                conn.execute(queries.INSERT_STAGED_EMBEDDINGS)
            self.graph.write(
                conn, document_id, source_uri=prepared.source_uri, title=prepared.title,
                content_sha=prepared.content_sha, chunks=prepared.chunks, links=prepared.links,
                is_new=prepared.is_new,
            )  # fmt: skip
        if prepared.is_new:
            self.report.new += 1
        else:
            self.report.changed += 1
        self.report.chunks_written += len(prepared.chunks)
        log.info(
            "%s: %s (%d chunks)",
            "new" if prepared.is_new else "changed",
            prepared.source_uri,
            len(prepared.chunks),
        )
        if self.progress:
            self.progress(
                "document",
                {
                    "source": prepared.source_uri,
                    "status": "new" if prepared.is_new else "changed",
                    "chunks": len(prepared.chunks),
                },
            )


def _as_vector(value: Any) -> Any:
    from pgvector import Vector

    return value if isinstance(value, Vector) else Vector(value)


# --- locking and the model ----------------------------------------------------------------------


def lock_holder(conn: psycopg.Connection[Any]) -> tuple[int | None, str]:
    """The backend pid holding the ingestion lock and its ``application_name`` (the ``what`` of
    :func:`ingest_lock`; empty for a session that set none), as ``pg_stat_activity`` shows them
    (no pid: released in between)."""
    row = conn.execute(
        queries.INGEST_LOCK_HOLDER,
        (INGEST_LOCK_KEY >> 32, INGEST_LOCK_KEY & 0xFFFFFFFF),
    ).fetchone()
    return (None, "") if row is None else (int(row[0]), str(row[1] or ""))


INGEST = "pgkb ingest"
"""The ``what`` of an ingestion run."""


@contextmanager
def ingest_lock(
    conn: psycopg.Connection[Any],
    *,
    wait: bool = True,
    what: str = INGEST,
    progress: ProgressCallback | None = None,
) -> Iterator[None]:
    """Hold the ingestion advisory lock (session level) for the block: every run that writes
    chunks or vectors (ingest, reembed) holds it, so they never interleave.

    ``what`` names the run in the session's ``application_name``, so a second run can say who
    is in the way. Another run holding the lock: with ``wait``, a ``waiting`` progress event
    (``holder``: who) and a wait for it; without, :class:`PgkbError` at once. The lock is
    released when the block ends or, if the process dies, when its connection closes.
    """
    conn.execute(queries.SET_APPLICATION_NAME, (what,))
    row = conn.execute(queries.TRY_ADVISORY_LOCK, (INGEST_LOCK_KEY,)).fetchone()
    conn.commit()
    if not row or not row[0]:
        pid, name = lock_holder(conn)
        conn.rollback()
        holder = name or "another pgkb run"
        if pid is not None:
            holder += f" (backend pid {pid})"
        if not wait:
            raise PgkbError(
                _refusal(what, pid, name),
                hint="wait for it to finish, or run with --wait to queue behind it",
            )
        log.warning("%s holds the ingestion lock; %s waits for it", holder, what)
        if progress:
            progress("waiting", {"holder": holder, "pid": pid})
        conn.execute(queries.ADVISORY_LOCK, (INGEST_LOCK_KEY,))
        conn.commit()
    try:
        yield
    finally:
        try:
            if conn.info.transaction_status != TransactionStatus.IDLE:  # a failure left one open
                conn.rollback()
            conn.execute(queries.ADVISORY_UNLOCK, (INGEST_LOCK_KEY,))
            conn.commit()
        except Exception:  # the connection is gone: so is its lock
            log.debug("could not release the ingest lock explicitly", exc_info=True)


def _refusal(what: str, pid: int | None, name: str) -> str:
    """Why ``what`` does not start: an ingest names the other run's pid (and what it is, when
    that is not an ingest too); another run says who is writing."""
    if what == INGEST:
        if pid is None:
            return "another pgkb ingest is running on this database"
        other = f": {name}" if name and name != INGEST else ""
        return f"another pgkb ingest is running on this database (backend pid {pid}{other})"
    who = name or "another pgkb run"
    if pid is not None:
        who += f" (backend pid {pid})"
    return f"{who} is writing to this knowledge base; {what} does not run beside it"


def stored_shas(
    conn: psycopg.Connection[Any], collection: str = DEFAULT_COLLECTION
) -> dict[str, str]:
    """The stored documents of ``collection`` (which it creates when it is new): source_uri ->
    content_sha."""
    conn.execute(queries.ENSURE_COLLECTION, (collection,))
    rows = conn.execute(queries.STORED_SHAS, (collection,)).fetchall()
    conn.commit()
    return {uri: sha for uri, sha in rows}


def finish_load(conn: psycopg.Connection[Any], report: IngestReport) -> None:
    """kb.finish_load after a run that wrote or removed something, so the first searches after
    it are planned and run as the later ones (a run that changed nothing skips it)."""
    if not (report.chunks_written or report.pruned):
        return
    with report.phase("analyze"):
        # a prune's chunk count is unknown here: analyze everything
        conn.execute(queries.FINISH_LOAD, (None if report.pruned else report.chunks_written,))
        conn.commit()


def _is_gone(uri: str) -> bool:
    """True only when the file is certainly gone: ``FileNotFoundError``, or
    ``NotADirectoryError`` (a folder on its path is a file now, so no file can be there). A
    permission error, an I/O error, a symlink loop or anything else that stops ``lstat`` keeps
    the document."""
    try:
        os.lstat(uri)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError as exc:
        log.warning("not pruned (cannot tell whether it still exists): %s: %s", uri, exc)
        return False
    return False


def folder_now_a_file(path: str) -> str | None:
    """The folder on ``path``'s way that is no folder any more (a file, a link to a file, or
    anything else that is not a directory), or None."""
    parent = Path(path).parent
    while parent != parent.parent:
        try:
            mode = os.stat(parent).st_mode
        except OSError:
            parent = parent.parent
            continue
        return None if stat.S_ISDIR(mode) else str(parent)
    return None


def replaced_folders_note(paths: Iterable[str], verb: str) -> list[str]:
    """One note per folder that became a file, naming it and the documents ``verb`` (pruned,
    removed) under it: what used to pass in silence."""
    found: dict[str, int] = {}
    for path in paths:
        folder = folder_now_a_file(path)
        if folder is not None:
            found[folder] = found.get(folder, 0) + 1
    return [
        f"{folder} is no longer a folder (a file is there now): the {count} document(s) stored "
        f"under it were {verb}"
        for folder, count in sorted(found.items())
    ]


def _under(uri: str, folder: Path) -> bool:
    return uri.startswith(str(folder).rstrip("/") + "/")


def prune_missing(
    conn: psycopg.Connection[Any],
    scan: Scan,
    report: IngestReport,
    *,
    max_fraction: float = 0.5,
    force: bool = False,
    names: SourceNames | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> int:
    """Delete documents under the scanned folders whose files no longer exist.

    Only a file that is certainly gone counts (see :func:`_is_gone`); documents under a folder
    that could not be listed are kept. When the deletion would remove more than
    ``max_fraction`` of the documents under the scanned folders (an unmounted disk, a wrong
    path), nothing is deleted and the run reports a failure, unless ``force``. ``names``: how
    source_uri is formed (absolute, or relative to the source root). Only documents of
    ``collection`` are considered.
    """
    names = names or SourceNames()
    present = {names.uri(f) for f in scan.files}
    doomed: list[str] = []
    gone_paths: list[str] = []
    total = 0
    for root in scan.roots:
        rows = conn.execute(
            queries.SOURCE_URIS_LIKE,
            (names.like_prefix(root), collection),
        ).fetchall()
        total += len(rows)
        for (uri,) in rows:
            if uri in present or not names.owns(uri):
                continue
            path = str(names.path(uri))
            if any(_under(path, folder) for folder in scan.unreadable):
                continue
            # a link leaving the folder now stands where the file (or folder) was: no file of
            # the folder is there any more (and what the link leads to is never read)
            outside = any(path == str(p) or _under(path, p) for p in scan.outside)
            if outside or _is_gone(path):
                doomed.append(uri)
                gone_paths.append(path)
    conn.commit()
    if not doomed:
        return 0
    if not force and len(doomed) > max_fraction * total:
        report.fail(
            ", ".join(str(r) for r in scan.roots),
            f"prune refused: it would delete {len(doomed)} of the {total} documents under the "
            f"given folders (more than prune_max_fraction = {max_fraction:g}); check that the "
            "folder is mounted and complete, then run again with --force to delete them",
        )
        report.notes.extend(replaced_folders_note(gone_paths, "kept (prune refused)"))
        return 0
    with conn.transaction():
        conn.execute(queries.DELETE_DOCUMENTS, (doomed, collection))
    for uri in doomed:
        log.info("pruned: %s", uri)
    report.notes.extend(replaced_folders_note(gone_paths, "pruned"))
    return len(doomed)
