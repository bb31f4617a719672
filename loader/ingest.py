"""Ingestion: sources in, chunks and embeddings out, incrementally and atomically.

The pipeline, per source:

1. **Hash first.** A file's bytes are read and hashed (sha256) together with what shapes its
   chunks (chunk size, overlap, prefix mode, model, category and ``--meta``). Equal to the stored
   ``kb.documents.content_sha``: skipped, without parsing, chunking or embedding.
2. **Extract and chunk** (``loader.extract``, ``loader.chunking``). A file that cannot be read or
   parsed is reported with its reason; its stored version (if any) stays as it was.
3. **Embed what is new.** Chunks whose embedded text (``content_sha``) already has a vector of the
   active model anywhere in the knowledge base reuse it; the rest go to the model in batches that
   span documents (``embedding_batch_size``).
4. **Replace atomically.** One transaction per document: upsert the ``kb.documents`` row, delete
   its chunks, binary-``COPY`` the new chunks and their vectors. Readers see the old version or
   the new one, never a mix or nothing; a run killed at any moment leaves every document whole.

A run holds a session advisory lock (two runs never interleave; kill -9 releases it with the
connection). Run-level problems (configuration, connection, model mismatch, an embeddings API that
fails after its retries) stop the run; what was already committed stays, complete.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loader.chunking import Chunk, Chunker
from loader.embedding import Embedder, ensure_model, get_embedder
from loader.errors import ConfigError, DatabaseError, PgkbError
from loader.extract import FORMATS, ExtractionError, Section, extract, mime_type
from loader.ops.runs import record_run
from loader.ops.sources import SourceNames
from loader.settings import Settings

log = logging.getLogger(__name__)

INGEST_LOCK_KEY = 0x70676B62_00000001
"""The advisory lock every ingestion run holds ('pgkb' + 1)."""

ProgressCallback = Callable[[str, dict[str, Any]], None]
"""``progress(event, info)``: events ``scanned`` (files), ``document`` (source, status, chunks),
``embedded`` (count), ``waiting`` (holder: the backend pid of the run holding the lock)."""


@dataclasses.dataclass(frozen=True)
class SourceDocument:
    """One document to ingest from memory (files go through :func:`ingest_paths`).

    ``sections`` carry heading paths when the source has headings; without them ``text`` is one
    section. ``source_uri`` is the document's identity: ingesting it again replaces it.
    """

    source_uri: str
    title: str
    text: str
    sections: list[Section] | None = None
    category: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


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
    aborted: str | None = None
    """Why the run stopped early (a run-level error), or None."""

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

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["seconds"] = {k: round(v, 3) for k, v in self.seconds.items()}
        data["exit_code"] = self.exit_code
        return data


# --- the work items -----------------------------------------------------------------------------


@dataclasses.dataclass
class _Prepared:
    """A source, parsed and chunked, waiting for its vectors and its transaction."""

    source_uri: str
    title: str
    content_sha: str
    category: str | None
    metadata: dict[str, Any]
    chunks: list[Chunk]
    is_new: bool


def _json_default(value: Any) -> str:
    return str(value)


def _document_sha(source_sha: str, fingerprint: str, category: str | None, meta: Any) -> str:
    """content_sha of a document: its bytes plus everything else that shapes its stored form."""
    extra = json.dumps([fingerprint, category, meta], sort_keys=True, default=_json_default)
    return hashlib.sha256(f"{source_sha}\n{extra}".encode()).hexdigest()


def _memory_sha(doc: SourceDocument) -> str:
    sections = [[list(s.heading_path), s.text] for s in doc.sections or []]
    payload = json.dumps([doc.title, doc.text, sections], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# --- the writer ---------------------------------------------------------------------------------


class _Writer:
    """Embeds prepared documents in shared batches and writes each in its own transaction."""

    def __init__(
        self,
        conn: Any,
        embedder: Embedder,
        model_id: int,
        batch_size: int,
        report: IngestReport,
        progress: ProgressCallback | None,
    ) -> None:
        self.conn = conn
        self.embedder = embedder
        self.model_id = model_id
        self.batch_size = batch_size
        self.report = report
        self.progress = progress
        self.pending: list[_Prepared] = []
        self.pending_texts = 0

    def add(self, prepared: _Prepared) -> None:
        self.pending.append(prepared)
        self.pending_texts += len(prepared.chunks)
        if self.pending_texts >= self.batch_size * 4 or len(self.pending) >= 256:
            self.flush()

    def _reusable(self, shas: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for start in range(0, len(shas), 5000):
            rows = self.conn.execute(
                """
                SELECT DISTINCT ON (c.content_sha) c.content_sha, e.embedding
                  FROM kb.chunks c
                  JOIN kb.embeddings e ON e.chunk_id = c.id AND e.model_id = %s
                 WHERE c.content_sha = ANY(%s)
                """,
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
            if missing:
                texts = list(missing.values())
                computed = self.embedder.embed(texts)
                if len(computed) != len(texts):
                    raise PgkbError(
                        f"the embedding model {self.embedder.name} returned {len(computed)} "
                        f"vectors for {len(texts)} texts"
                    )
                for sha, vector in zip(missing, computed, strict=True):
                    if len(vector) != self.embedder.dims:
                        raise PgkbError(
                            f"the embedding model {self.embedder.name} returned a "
                            f"{len(vector)}-dimensional vector, expected {self.embedder.dims}"
                        )
                    vectors[sha] = vector
                self.report.embeddings_computed += len(texts)
            for prepared in batch:
                self.report.embeddings_reused += sum(
                    1 for c in prepared.chunks if c.content_sha in reused_shas
                )
            if self.progress:
                self.progress("embedded", {"count": len(missing)})
        with self.report.phase("write"):
            for prepared in batch:
                self._write(prepared, vectors)

    def _write(self, prepared: _Prepared, vectors: dict[str, Any]) -> None:
        conn = self.conn
        with conn.transaction():
            row = conn.execute(
                """
                INSERT INTO kb.documents AS d (source_uri, title, content_sha, category, metadata)
                VALUES (%s, %s, %s, %s, %s::jsonb)
                ON CONFLICT (source_uri) DO UPDATE
                   SET title = excluded.title,
                       content_sha = excluded.content_sha,
                       category = excluded.category,
                       metadata = excluded.metadata,
                       updated_at = now()
                RETURNING d.id
                """,
                (
                    prepared.source_uri,
                    prepared.title,
                    prepared.content_sha,
                    prepared.category,
                    json.dumps(prepared.metadata, default=_json_default, ensure_ascii=False),
                ),
            ).fetchone()
            assert row is not None
            document_id = row[0]
            conn.execute("DELETE FROM kb.chunks WHERE document_id = %s", (document_id,))
            with conn.cursor().copy(
                "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha,"
                " token_count) FROM STDIN WITH (FORMAT BINARY)"
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
            ids = dict(
                conn.execute(
                    "SELECT chunk_index, id FROM kb.chunks WHERE document_id = %s",
                    (document_id,),
                ).fetchall()
            )
            with conn.cursor().copy(
                "COPY kb.embeddings (chunk_id, model_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int8", "int4", "vector"])
                for chunk in prepared.chunks:
                    copy.write_row(
                        (ids[chunk.index], self.model_id, _as_vector(vectors[chunk.content_sha]))
                    )
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


def _lock_holder(conn: Any) -> int | None:
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = %s AND objid = %s AND objsubid = 1",
        (INGEST_LOCK_KEY >> 32, INGEST_LOCK_KEY & 0xFFFFFFFF),
    ).fetchone()
    return None if row is None else int(row[0])


@contextmanager
def ingest_lock(
    conn: Any, *, wait: bool = True, progress: ProgressCallback | None = None
) -> Iterator[None]:
    """Hold the ingestion advisory lock (session level) for the block.

    ``wait=False``: raise :class:`PgkbError` at once if another run holds it. The lock is
    released when the block ends or, if the process dies, when its connection closes.
    """
    from psycopg.pq import TransactionStatus

    if wait:
        holder = _lock_holder(conn)
        if holder is not None:
            log.warning("another ingestion (backend pid %s) is running; waiting for it", holder)
            if progress:
                progress("waiting", {"holder": holder})
        conn.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK_KEY,))
    else:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (INGEST_LOCK_KEY,)).fetchone()
        if not row or not row[0]:
            holder = _lock_holder(conn)
            conn.rollback()
            raise PgkbError(
                "another pgkb ingest is running on this database"
                + (f" (backend pid {holder})" if holder else ""),
                hint="wait for it to finish, or run with --wait to queue behind it",
            )
    conn.commit()
    try:
        yield
    finally:
        try:
            if conn.info.transaction_status != TransactionStatus.IDLE:  # a failure left one open
                conn.rollback()
            conn.execute("SELECT pg_advisory_unlock(%s)", (INGEST_LOCK_KEY,))
            conn.commit()
        except Exception:  # the connection is gone: so is its lock
            log.debug("could not release the ingest lock explicitly", exc_info=True)


def _prepare_model(conn: Any, embedder: Embedder, settings: Settings) -> tuple[int, Chunker]:
    chunker = Chunker.from_settings(settings, embedder)  # ConfigError if chunks cannot fit
    model_id = ensure_model(conn, embedder, (settings.hnsw_m, settings.hnsw_ef_construction))
    return model_id, chunker


def _stored_shas(conn: Any) -> dict[str, str]:
    rows = conn.execute("SELECT source_uri, content_sha FROM kb.documents").fetchall()
    conn.commit()
    return {uri: sha for uri, sha in rows}


# --- in-memory documents ------------------------------------------------------------------------


def ingest_documents(
    conn: Any,
    documents: Iterable[SourceDocument],
    embedder: Embedder,
    settings: Settings,
    *,
    category: str | None = None,
    progress: ProgressCallback | None = None,
    wait: bool = True,
) -> IngestReport:
    """Ingest in-memory documents (e.g. a BEIR corpus) with the same guarantees as files.

    ``category`` applies to documents that have none of their own. An unchanged document (same
    title, text, sections, category and metadata) is skipped; a changed one is replaced in one
    transaction. Raises :class:`PgkbError` for run-level problems (the report so far is lost to
    the caller, but every committed document is complete).
    """
    report = IngestReport()
    started = time.perf_counter()
    Chunker.from_settings(settings, embedder)  # ConfigError before touching the database
    with ingest_lock(conn, wait=wait, progress=progress):
        model_id, chunker = _prepare_model(conn, embedder, settings)
        fingerprint = chunker.fingerprint()
        stored = _stored_shas(conn)
        writer = _Writer(conn, embedder, model_id, settings.embedding_batch_size, report, progress)
        for doc in documents:
            report.files_seen += 1
            doc_category = doc.category if doc.category is not None else category
            sha = _document_sha(_memory_sha(doc), fingerprint, doc_category, doc.metadata)
            previous = stored.get(doc.source_uri)
            if previous == sha:
                report.unchanged += 1
                continue
            with report.phase("chunk"):
                sections = doc.sections if doc.sections else [Section((), doc.text)]
                chunks = chunker.chunk(doc.title, sections)
            if not chunks:
                report.fail(doc.source_uri, "no text to index")
                continue
            writer.add(
                _Prepared(
                    doc.source_uri,
                    doc.title,
                    sha,
                    doc_category,
                    dict(doc.metadata),
                    chunks,
                    previous is None,
                )
            )
        writer.flush()
        _analyze(conn, report)
    report.seconds["total"] = time.perf_counter() - started
    return report


def _analyze(conn: Any, report: IngestReport) -> None:
    if report.chunks_written >= 1000:
        with report.phase("analyze"):
            conn.execute("ANALYZE kb.documents, kb.chunks, kb.embeddings")
            conn.commit()


# --- files --------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Scan:
    files: list[Path] = dataclasses.field(default_factory=list)
    roots: list[Path] = dataclasses.field(default_factory=list)
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def scan_paths(paths: Sequence[str | os.PathLike[str]]) -> _Scan:
    """Files (resolved, de-duplicated, sorted) under ``paths``; loops and dead links reported.

    A path that does not exist is a :class:`ConfigError` (nothing is done). Directories are
    walked recursively, following symbolic links but never into a directory already visited
    (a symlink loop is reported, not followed forever); hidden files and folders are skipped.
    """
    scan = _Scan()
    seen: set[Path] = set()

    def add(path: Path) -> None:
        try:
            real = path.resolve(strict=True)
        except RuntimeError:
            scan.failures.append((str(path.absolute()), "symlink loop"))
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                scan.failures.append((str(path.absolute()), "symlink loop"))
            elif path.is_symlink():
                scan.failures.append((str(path.absolute()), "broken symbolic link"))
            else:
                scan.failures.append((str(path.absolute()), f"cannot read: {exc.strerror}"))
            return
        if real not in seen:
            seen.add(real)
            scan.files.append(real)

    for raw in paths:
        path = Path(raw).expanduser().absolute()
        if not os.path.lexists(path):
            raise ConfigError(f"{path} does not exist", hint="check the path you gave to ingest")
        try:
            is_dir = path.is_dir()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                scan.failures.append((str(path), "symlink loop"))
                continue
            raise
        if not is_dir:
            if mime_type(path) is None and path.exists():
                scan.failures.append(
                    (
                        str(path.resolve()),
                        f"unsupported file type {path.suffix or '(none)'}; pgkb reads "
                        + ", ".join(sorted(FORMATS)),
                    )
                )
                continue
            add(path)
            continue
        root = path.resolve()
        scan.roots.append(root)
        visited: set[tuple[int, int]] = set()

        def on_error(exc: OSError) -> None:
            scan.failures.append((str(exc.filename), f"cannot read folder: {exc.strerror}"))

        for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=on_error):
            try:
                st = os.stat(dirpath)
            except OSError as exc:
                scan.failures.append((dirpath, f"cannot read folder: {exc.strerror}"))
                dirnames[:] = []
                continue
            key = (st.st_dev, st.st_ino)
            if key in visited:
                scan.failures.append(
                    (dirpath, f"symlink loop (leads back to {os.path.realpath(dirpath)})")
                )
                dirnames[:] = []
                continue
            visited.add(key)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith(".") or mime_type(name) is None:
                    continue
                add(Path(dirpath) / name)
    scan.files.sort()
    return scan


def _read_file(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, or :class:`ExtractionError` (too large, vanished, changed while read)."""
    try:
        before = os.stat(path)
        if before.st_size > max_bytes:
            raise ExtractionError(
                f"file too large ({before.st_size / 1e6:.1f} MB, the limit is "
                f"{max_bytes / 1e6:.1f} MB); raise PGKB_MAX_FILE_MB to ingest it"
            )
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
        after = os.stat(path)
    except FileNotFoundError:
        raise ExtractionError("deleted during the run (it will be pruned by --prune)") from None
    except IsADirectoryError:
        raise ExtractionError("is a directory") from None
    except PermissionError:
        raise ExtractionError("permission denied") from None
    except OSError as exc:
        raise ExtractionError(f"cannot read: {exc.strerror or exc}") from None
    if (
        len(data) > max_bytes
        or (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns)
        or len(data) != after.st_size
    ):
        raise ExtractionError(
            "changed while being read; its stored version is kept, run again to pick it up"
        )
    return data


def _file_metadata(path: Path, data: bytes, mime: str | None) -> dict[str, Any]:
    try:
        mtime = os.stat(path).st_mtime
        modified = dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="seconds")
    except OSError:
        modified = None
    return {
        "file_name": path.name,
        "mime_type": mime,
        "size_bytes": len(data),
        "modified": modified,
    }


def ingest_paths(
    settings: Settings,
    paths: Sequence[str | os.PathLike[str]],
    *,
    category: str | None = None,
    meta: dict[str, str] | None = None,
    prune: bool = False,
    wait: bool = True,
    progress: ProgressCallback | None = None,
    embedder: Embedder | None = None,
) -> IngestReport:
    """Ingest files and folders (recursively) into the configured database.

    Run-level problems raise :class:`PgkbError` before anything is written (a missing path, bad
    settings, no connection, a model mismatch, chunks larger than the model reads). A failure of
    the embedding model mid-run sets ``report.aborted``: documents already committed are
    complete, the rest keep their stored version, and nothing is pruned.
    """
    from loader.db import connection

    report = IngestReport()
    started = time.perf_counter()
    meta = dict(meta or {})
    with report.phase("scan"):
        scan = scan_paths(paths)
    names = SourceNames.for_root(settings.source_root)  # source_uri relative to it, if set
    names.check([*scan.files, *scan.roots])
    embedder = embedder or get_embedder(settings)
    max_bytes = int(settings.max_file_mb * 1_000_000)
    Chunker.from_settings(settings, embedder)  # ConfigError before touching the database
    with (
        connection(settings) as conn,
        ingest_lock(conn, wait=wait, progress=progress),
        record_run(conn, paths, report),
    ):
        model_id, chunker = _prepare_model(conn, embedder, settings)
        fingerprint = chunker.fingerprint()
        for source, reason in scan.failures:
            report.fail(source, reason)
        report.files_seen = len(scan.files) + len(scan.failures)
        if progress:
            progress("scanned", {"files": [str(f) for f in scan.files]})
        stored = _stored_shas(conn)
        writer = _Writer(conn, embedder, model_id, settings.embedding_batch_size, report, progress)
        try:
            for path in scan.files:
                source = names.uri(path)
                prepared = _prepare_file(
                    path, source, stored, fingerprint, chunker, category, meta, max_bytes,
                    report,
                )  # fmt: skip
                if progress:
                    status = "unchanged" if prepared is None else "parsed"
                    progress("file", {"source": source, "status": status})
                if prepared is not None:
                    writer.add(prepared)
            writer.flush()
        except PgkbError as exc:
            if isinstance(exc, ConfigError | DatabaseError):
                raise
            report.aborted = str(exc)
            log.error("run stopped: %s", exc)
        if prune and not report.aborted:
            with report.phase("prune"):
                report.pruned = _prune(conn, scan, names)
        _analyze(conn, report)
    report.seconds["total"] = time.perf_counter() - started
    return report


def _prepare_file(
    path: Path,
    source: str,
    stored: dict[str, str],
    fingerprint: str,
    chunker: Chunker,
    category: str | None,
    meta: dict[str, str],
    max_bytes: int,
    report: IngestReport,
) -> _Prepared | None:
    """Read, hash, and (if changed) parse and chunk one file; None when unchanged or failed."""
    try:
        with report.phase("read"):
            data = _read_file(path, max_bytes)
            sha = _document_sha(hashlib.sha256(data).hexdigest(), fingerprint, category, meta)
        previous = stored.get(source)
        if previous == sha:
            report.unchanged += 1
            return None
        mime = mime_type(path)
        with report.phase("extract"):
            extracted = extract(data, path, mime)
        with report.phase("chunk"):
            title = extracted.title or path.stem
            chunks = chunker.chunk(title, extracted.sections)
        if not chunks:
            raise ExtractionError("no text to index")
    except ExtractionError as exc:
        report.fail(source, exc.message)
        return None
    except Exception as exc:  # a parser bug on one odd file must not stop the run
        log.debug("unexpected error on %s", source, exc_info=True)
        report.fail(source, f"cannot extract: {type(exc).__name__}: {exc}")
        return None
    metadata = {**_file_metadata(path, data, mime), **extracted.metadata, **meta}
    return _Prepared(source, title, sha, category, metadata, chunks, previous is None)


def _prune(conn: Any, scan: _Scan, names: SourceNames | None = None) -> int:
    """Delete documents under the scanned folders whose files no longer exist."""
    names = names or SourceNames()
    present = {names.uri(f) for f in scan.files}
    doomed: list[str] = []
    for root in scan.roots:
        rows = conn.execute(
            "SELECT source_uri FROM kb.documents WHERE source_uri LIKE %s",
            (names.like_prefix(root),),
        ).fetchall()
        for (uri,) in rows:
            if uri not in present and names.owns(uri) and not os.path.lexists(names.path(uri)):
                doomed.append(uri)
    conn.commit()
    if not doomed:
        return 0
    with conn.transaction():
        conn.execute("DELETE FROM kb.documents WHERE source_uri = ANY(%s)", (doomed,))
    for uri in doomed:
        log.info("pruned: %s", uri)
    return len(doomed)
