"""The ingestion pipeline: hash first, extract and chunk what changed, embed what is new, replace
atomically (see :mod:`loader.ingest`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from loader import telemetry
from loader.db.session import connection
from loader.errors import ConfigError, DatabaseError, PgkbError
from loader.filters import DEFAULT_COLLECTION, check_collection
from loader.graph.links import resolve_links
from loader.ingest.bulk_index import bulk_index
from loader.ingest.chunking import Chunker
from loader.ingest.extract import ExtractionError, Section, extract, mime_type
from loader.ingest.report import IngestReport, ProgressCallback
from loader.ingest.runs import record_run
from loader.ingest.sources import (
    SourceDocument,
    SourceNames,
    file_metadata,
    read_file,
    scan_paths,
    shown_path,
)
from loader.ingest.worker import Extractor
from loader.ingest.writer import (
    Prepared,
    Writer,
    finish_load,
    ingest_lock,
    json_default,
    prune_missing,
    stored_shas,
)
from loader.providers.embeddings import Embedder, get_embedder
from loader.providers.registry import ensure_model
from loader.settings import Settings
from loader.similarity import ensure_profile

log = logging.getLogger(__name__)

EXTRACT = extract
"""The extraction function (tests replace it with one that hangs or crashes on some files)."""


def _document_sha(source_sha: str, fingerprint: str, category: str | None, meta: Any) -> str:
    """content_sha of a document: its bytes plus everything else that shapes its stored form."""
    extra = json.dumps([fingerprint, category, meta], sort_keys=True, default=json_default)
    return hashlib.sha256(f"{source_sha}\n{extra}".encode()).hexdigest()


def _memory_sha(doc: SourceDocument) -> str:
    sections = [[list(s.heading_path), s.text] for s in doc.sections or []]
    payload = json.dumps([doc.title, doc.text, sections], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _prepare_model(
    conn: psycopg.Connection[Any], embedder: Embedder, settings: Settings
) -> tuple[int, Chunker]:
    chunker = Chunker.from_settings(settings, embedder)  # ConfigError if chunks cannot fit
    model_id = ensure_model(conn, embedder, (settings.hnsw_m, settings.hnsw_ef_construction))
    return model_id, chunker


# --- in-memory documents ------------------------------------------------------------------------


def ingest_documents(
    conn: psycopg.Connection[Any],
    documents: Iterable[SourceDocument],
    embedder: Embedder,
    settings: Settings,
    *,
    category: str | None = None,
    progress: ProgressCallback | None = None,
    wait: bool = True,
    collection: str = DEFAULT_COLLECTION,
) -> IngestReport:
    """Ingest in-memory documents (e.g. a BEIR corpus) with the same guarantees as files, into
    ``collection`` (created when new).

    ``category`` applies to documents that have none of their own. An unchanged document (same
    title, text, sections, category and metadata) is skipped; a changed one is replaced in one
    transaction. Raises :class:`PgkbError` for run-level problems (the report so far is lost to
    the caller, but every committed document is complete).
    """
    with telemetry.span("pgkb.ingest", collection=collection, in_memory=True) as span:
        report = _ingest_documents(
            conn, documents, embedder, settings, category=category, progress=progress,
            wait=wait, collection=collection,
        )  # fmt: skip
        span.set(**report_attributes(report))
    return report


def _ingest_documents(
    conn: psycopg.Connection[Any],
    documents: Iterable[SourceDocument],
    embedder: Embedder,
    settings: Settings,
    *,
    category: str | None,
    progress: ProgressCallback | None,
    wait: bool,
    collection: str,
) -> IngestReport:
    report = IngestReport()
    started = time.perf_counter()
    check_collection(collection)
    Chunker.from_settings(settings, embedder)  # ConfigError before touching the database
    with ingest_lock(conn, wait=wait, progress=progress):
        model_id, chunker = _prepare_model(conn, embedder, settings)
        fingerprint = chunker.fingerprint()
        stored = stored_shas(conn, collection)
        with bulk_index(conn, model_id, settings, report=report) as bulk:
            writer = Writer(
                conn, embedder, model_id, settings.embedding_batch_size, report, progress, bulk,
                collection=collection,
                graph_across_collections=settings.graph_across_collections,
            )  # fmt: skip
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
                    Prepared(
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
        writer.finish_graph(settings)
        finish_load(conn, report)
        refresh_profile(conn, embedder, report)
    report.seconds["total"] = time.perf_counter() - started
    return report


def refresh_profile(
    conn: psycopg.Connection[Any], embedder: Embedder, report: IngestReport
) -> None:
    """Measure the corpus's similarity profile again when the corpus or model changed enough
    (:mod:`loader.similarity`); a failure is logged and the ingest stands."""
    if report.aborted:
        return
    try:
        with report.phase("profile"):
            ensure_profile(conn, embedder.embed)
    except (PgkbError, psycopg.Error) as exc:
        conn.rollback()
        log.warning("similarity profile not measured: %s", exc)


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
    force: bool = False,
    collection: str = DEFAULT_COLLECTION,
) -> IngestReport:
    """Ingest files and folders (recursively) into the configured database, into
    ``collection`` (created when new; --prune removes only its documents).

    Run-level problems raise :class:`PgkbError` before anything is written (a missing path, bad
    settings, no connection, a model mismatch, chunks larger than the model reads). A failure of
    the embedding model mid-run sets ``report.aborted``: documents already committed are
    complete, the rest keep their stored version, and nothing is pruned.
    """
    with telemetry.span("pgkb.ingest", collection=collection, paths=len(paths)) as span:
        report = _ingest_paths(
            settings, paths, category=category, meta=meta, prune=prune, wait=wait,
            progress=progress, embedder=embedder, force=force, collection=collection,
        )  # fmt: skip
        span.set(**report_attributes(report))
    return report


def report_attributes(report: IngestReport) -> dict[str, Any]:
    """What an ingest span records of its run."""
    return {
        "files_seen": report.files_seen,
        "new": report.new,
        "changed": report.changed,
        "unchanged": report.unchanged,
        "pruned": report.pruned,
        "failed": len(report.failed),
        "chunks_written": report.chunks_written,
        "aborted": report.aborted,
    }


def _ingest_paths(
    settings: Settings,
    paths: Sequence[str | os.PathLike[str]],
    *,
    category: str | None = None,
    meta: dict[str, str] | None = None,
    prune: bool = False,
    wait: bool = True,
    progress: ProgressCallback | None = None,
    embedder: Embedder | None = None,
    force: bool = False,
    collection: str = DEFAULT_COLLECTION,
) -> IngestReport:
    """:func:`ingest_paths` without its span."""
    report = IngestReport()
    started = time.perf_counter()
    meta = dict(meta or {})
    check_collection(collection)
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
        record_run(conn, paths, report),  # kb.ingest_runs: pgkb stats shows the last runs
        new_extractor(settings) as extractor,
    ):
        model_id, chunker = _prepare_model(conn, embedder, settings)
        fingerprint = chunker.fingerprint()
        for source, reason in scan.failures:
            report.fail(shown_path(source), reason)
        report.files_seen = len(scan.files) + len(scan.failures)
        if progress:
            size = sum(_size(f) for f in scan.files)
            progress("scanned", {"files": [str(f) for f in scan.files], "bytes": size})
        stored = stored_shas(conn, collection)
        try:
            # a load of hnsw_bulk_threshold embeddings or more builds the HNSW index after it
            with bulk_index(conn, model_id, settings, report=report) as bulk:
                writer = Writer(
                    conn, embedder, model_id, settings.embedding_batch_size, report, progress,
                    bulk, collection=collection,
                    graph_across_collections=settings.graph_across_collections,
                )  # fmt: skip
                for path in scan.files:
                    source = names.uri(path)
                    prepared = _prepare_file(
                        path, source, stored, fingerprint, chunker, category, meta, max_bytes,
                        report, extractor, scan.identity.get(path),
                    )  # fmt: skip
                    if progress:
                        status = "unchanged" if prepared is None else "parsed"
                        chunks = 0 if prepared is None else len(prepared.chunks)
                        progress(
                            "file",
                            {"source": source, "status": status, "bytes": _size(path),
                             "chunks": chunks},
                        )  # fmt: skip
                    if prepared is not None:
                        writer.add(prepared)
                writer.flush()
            writer.finish_graph(settings)
        except PgkbError as exc:
            if isinstance(exc, ConfigError | DatabaseError):
                raise
            report.aborted, report.hint = exc.message, exc.hint
            log.error("run stopped: %s", exc)
        if prune and not report.aborted:
            with report.phase("prune"):
                report.pruned = prune_missing(
                    conn,
                    scan,
                    report,
                    max_fraction=settings.prune_max_fraction,
                    force=force,
                    names=names,
                    collection=collection,
                )
        finish_load(conn, report)
        refresh_profile(conn, embedder, report)
    report.seconds["total"] = time.perf_counter() - started
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def extract_bounded(data: bytes, path: Path, mime: str | None, extractor: Extractor) -> Any:
    """:func:`extract` in ``extractor``'s worker process (killed after ``extract_timeout``
    seconds, capped at ``extract_memory_mb``), refusing a text larger than ``max_text_mb``
    million characters: one pathological file cannot hold the ingest lock for long, keep a CPU
    busy after its deadline or fill the memory."""
    extracted = extractor.extract(data, path, mime)
    size = sum(len(s.text) for s in extracted.sections)
    if size > extractor.max_text_mb * 1_000_000:
        raise ExtractionError(
            f"extracted text too large ({size / 1e6:.1f} million characters, the limit is "
            f"{extractor.max_text_mb:g} million, max_text_mb); raise PGKB_MAX_TEXT_MB to ingest it"
        )
    return extracted


def new_extractor(settings: Settings) -> Extractor:
    """The run's extraction worker (started on the first file that needs parsing)."""
    return Extractor(
        settings.extract_timeout,
        settings.extract_memory_mb,
        EXTRACT,
        max_text_mb=settings.max_text_mb,
    )


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
    extractor: Extractor,
    identity: tuple[int, int] | None = None,
) -> Prepared | None:
    """Read, hash, and (if changed) parse and chunk one file; None when unchanged or failed.
    ``identity``: the file's ``(st_dev, st_ino)`` at the scan (what is read must be that file)."""
    try:
        with report.phase("read"):
            data = read_file(path, max_bytes, identity)
            sha = _document_sha(hashlib.sha256(data).hexdigest(), fingerprint, category, meta)
        previous = stored.get(source)
        if previous == sha:
            report.unchanged += 1
            return None
        mime = mime_type(path)
        with report.phase("extract"):
            extracted = extract_bounded(data, path, mime, extractor)
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
    metadata = {**file_metadata(path, data, mime), **extracted.metadata, **meta}
    links = resolve_links(source, extracted.links)
    return Prepared(source, title, sha, category, metadata, chunks, previous is None, links)
