"""What ``pgkb eval`` does end to end: ingest, retrieve, score, calibrate, report.

- :func:`evaluate_questions`: a question file over a corpus folder (default: the bundled sample),
  ingested into the configured knowledge base (unchanged documents are skipped by content hash).
- :func:`evaluate_beir`: a BEIR dataset, ingested into its own database on the same server
  (``pgkb_beir_<dataset>_<model>``, created and migrated on first use), so it never mixes with
  the user's knowledge base; a re-run reuses what is already there.

Both return a JSON-ready report (see ``loader.evaluation.report`` for the table).

Over 400 lines on purpose: it is the one script of ``pgkb eval`` (bundled questions and BEIR),
step by step; its parts live in the sibling modules.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from loader.answer.abstention import AbstentionRule, load_rule, save_rule
from loader.db import keyword_backend, queries
from loader.db.connect import connect, database_url
from loader.db.migrations import current_revision, upgrade
from loader.db.session import connection
from loader.errors import PgkbError
from loader.evaluation.beir import BeirDataset, load_beir
from loader.evaluation.calibrate import Sample, calibrate, rule_rates
from loader.evaluation.questions import Question, load_questions, unmatched_sources
from loader.evaluation.runner import (
    MODES,
    EvalQuery,
    QueryResult,
    abstention_summary,
    aggregate,
    apply_abstention,
    per_query,
    run_queries,
)
from loader.filters import DEFAULT_COLLECTION
from loader.ingest.pipeline import ingest_documents, ingest_paths
from loader.ingest.sources import SourceDocument
from loader.providers.embeddings import chunk_size, get_embedder, identity
from loader.resources import sample_corpus_dir
from loader.search import search
from loader.settings import Settings
from loader.similarity import ensure_profile

Progress = Callable[[str], None]
RERANKER_NOTE = (
    "not run: no reranker is configured (set rerank_provider and rerank_model to compare one)"
)
RERANKED = "reranked"
"""The retriever that is hybrid search with the configured reranker after the fusion."""


def _quiet(_: str) -> None:
    pass


DEFAULT_BACKEND = Settings.__dataclass_fields__["embedding_backend"].default
"""A local model's backend is recorded only when it is not the default one (ONNX Runtime, whose
vectors equal the torch ones the bundled baselines were recorded with, within cosine 0.9999)."""


def parameters(settings: Settings) -> dict[str, Any]:
    """The settings that shape retrieval, recorded beside every figure (the input limit and
    chunk size as the model makes them; prompts, backend and reranker only when set)."""
    embedder = get_embedder(settings)
    params: dict[str, Any] = {
        "embedding_provider": settings.embedding_provider,
        "embedding_model": settings.embedding_model,
        "embedding_dims": settings.embedding_dims,
        "embedding_max_input_tokens": embedder.max_input_tokens,
        "chunk_tokens": chunk_size(settings, embedder),
        "chunk_overlap": settings.chunk_overlap,
        "embed_heading_path": settings.embed_heading_path,
        "vector_candidates": settings.vector_candidates,
        "keyword_candidates": settings.keyword_candidates,
        "rrf_k": settings.rrf_k,
        "vector_weight": settings.vector_weight,
        "keyword_weight": settings.keyword_weight,
        "exact_keyword_weight": settings.exact_keyword_weight,
        "keyword_confidence": settings.keyword_confidence,
        "lead_slot": settings.lead_slot,
        "match_count": settings.match_count,
        "min_similarity": settings.min_similarity,
        "keyword_ranking": settings.keyword_ranking,
        "max_per_document": settings.max_per_document,
    }
    params.update({f"embedding_{k}": v for k, v in identity(embedder).items() if v})
    if settings.embedding_provider == "local" and settings.embedding_backend != DEFAULT_BACKEND:
        params["embedding_backend"] = settings.embedding_backend
    if settings.rerank_provider != "off":
        params.update(
            rerank_provider=settings.rerank_provider,
            rerank_model=settings.rerank_model,
            rerank_candidates=settings.rerank_candidates,
        )
    return params


class _Retriever:
    """``retrieve(text, embedding, mode, limit)`` for the runner: the three legs without the
    reranker, and :data:`RERANKED` (hybrid, then the reranker) when one is configured; counts
    the queries whose rerank failed (and kept the fused order)."""

    def __init__(self, conn: psycopg.Connection[Any], settings: Settings) -> None:
        self.conn, self.settings = conn, settings
        self.reranked = 0
        self.failures: list[str] = []

    def __call__(self, text: str, embedding: Sequence[float], mode: str, limit: int) -> list[Any]:

        notes: list[str] = []
        rerank = mode == RERANKED
        hits = search(
            self.conn,
            text,
            embedding,
            settings=self.settings,
            mode="hybrid" if rerank else mode,  # type: ignore[arg-type]
            limit=limit,
            rerank=rerank,
            notes=notes,
        )
        if rerank:
            self.reranked += 1
            self.failures.extend(notes)
        return list(hits)


def _modes(settings: Settings) -> tuple[str, ...]:
    return (*MODES, RERANKED) if settings.rerank_provider != "off" else MODES


def _reranked_note(settings: Settings, retrievers: Sequence[_Retriever]) -> str | None:
    """The report's ``reranked`` entry: why it did not run, or how often its rerank failed."""
    if settings.rerank_provider == "off":
        return RERANKER_NOTE
    failed = sum(len(r.failures) for r in retrievers)
    if not failed:
        return None
    total = sum(r.reranked for r in retrievers)
    first = next(f for r in retrievers for f in r.failures)
    return (
        f"the reranker failed on {failed} of {total} queries, which kept the fused order "
        f"(first: {first})"
    )


def _samples(results: Sequence[QueryResult]) -> list[Sample]:
    return [
        Sample(r.query.id, r.signals, not r.query.answerable)
        for r in results
        if r.signals is not None
    ]


def _ingest_collection(settings: Settings) -> str:
    """The collection an eval ingests its corpus into: the one ``--collection`` names (the
    eval reads only it), else the default."""
    names = settings.collection_names()
    return names[0] if len(names) == 1 else DEFAULT_COLLECTION


def _ingest_corpus(settings: Settings, corpus: Path, progress: Progress) -> dict[str, Any]:

    if not corpus.exists():
        raise PgkbError(
            f"corpus {corpus} does not exist",
            hint="pass --corpus with a folder of documents (default: the bundled sample)",
        )
    progress(f"ingesting {corpus} (unchanged documents are skipped)")
    started = time.monotonic()
    report = ingest_paths(settings, [corpus], collection=_ingest_collection(settings))
    summary = _report_dict(report)
    summary["seconds"] = round(time.monotonic() - started, 1)
    progress(f"ingestion done in {summary['seconds']} s: {_short(summary)}")
    failed = summary.get("failed")
    if failed:
        progress(f"warning: {failed if isinstance(failed, int) else len(failed)} documents failed")
    return summary


def _create_schema_if_missing(settings: Settings, progress: Progress) -> None:
    """A database without the kb schema gets it (one that is behind is left to the user)."""
    url = database_url(settings)
    conn = connect(url, register=False)
    try:
        revision = current_revision(conn)
    finally:
        conn.close()
    if revision is None:
        progress("the database has no kb schema yet: creating it (pgkb db upgrade)")
        upgrade(url)


def _report_dict(report: Any) -> dict[str, Any]:
    if hasattr(report, "to_dict"):
        data = report.to_dict()
    elif hasattr(report, "__dataclass_fields__"):
        data = dataclasses.asdict(report)
    else:
        data = dict(vars(report)) if hasattr(report, "__dict__") else {"report": str(report)}
    return {k: v for k, v in data.items() if not isinstance(v, list | dict) or len(str(v)) < 2000}


def _short(summary: dict[str, Any]) -> str:
    keys = [k for k, v in summary.items() if isinstance(v, int) and k != "seconds"]
    return ", ".join(f"{k} {summary[k]}" for k in keys) or "done"


def _ensure_profile(conn: psycopg.Connection[Any], embedder: Any, progress: Progress) -> None:
    """The gate's similarity profile, measured first when missing or stale; a read-only
    database keeps what it has (the relative_similarity signal is None without one)."""
    try:
        profile = ensure_profile(conn, embedder.embed)
    except psycopg.Error as exc:
        conn.rollback()
        progress(f"warning: similarity profile not measured ({exc.diag.message_primary})")
        return
    if profile is None:
        progress("no similarity profile: too few chunks to sample")


def _evaluate_items(
    conn: psycopg.Connection[Any],
    settings: Settings,
    items: Sequence[EvalQuery],
    *,
    k: int,
    abstention: bool,
    progress: Progress,
    retrievers: list[_Retriever],
) -> list[QueryResult]:
    """Run ``items`` through every retriever (recording it in ``retrievers``)."""
    embedder = get_embedder(settings)
    retriever = _Retriever(conn, settings)
    retrievers.append(retriever)
    if abstention:
        _ensure_profile(conn, embedder, progress)
    return run_queries(
        conn,
        settings,
        items,
        embed_query=embedder.embed_query,
        embed=embedder.embed,
        retrieve=retriever,
        k=k,
        modes=_modes(settings),
        abstention=abstention,
        progress=progress,
    )


def evaluate_questions(
    settings: Settings,
    *,
    questions_file: Path,
    corpus: Path | None,
    k: int = 5,
    do_calibrate: bool = False,
    holdout_file: Path | None = None,
    max_false_positive_rate: float = 0.05,
    ingest: bool = True,
    progress: Progress = _quiet,
) -> dict[str, Any]:
    """The eval over a question file; with ``do_calibrate`` also derives and stores the rule."""
    questions = load_questions(questions_file)
    holdout = load_questions(holdout_file) if holdout_file else None
    if do_calibrate:
        unanswerable = sum(not q.answerable for q in questions)
        if unanswerable == 0 or unanswerable == len(questions):
            raise PgkbError(
                f"cannot calibrate the abstention gate from {questions_file}: it holds "
                f"{unanswerable} unanswerable and {len(questions) - unanswerable} answerable "
                "questions, and calibration needs both",
                hint="add questions of kind 'unanswerable' (sources: []) that share the "
                "corpus's vocabulary",
            )
    corpus_dir = corpus or sample_corpus_dir()
    if ingest:
        _create_schema_if_missing(settings, progress)
    ingestion = _ingest_corpus(settings, corpus_dir, progress) if ingest else None

    with connection(settings) as conn:
        uris = [row[0] for row in conn.execute(queries.SOURCE_URIS)]
        conn.rollback()
        if not uris:
            raise PgkbError(
                "the knowledge base holds no documents to evaluate",
                hint="check --corpus, or run `pgkb ingest` first",
            )
        missing = unmatched_sources([*questions, *(holdout or [])], uris)
        for name in missing:
            progress(f"warning: expected source {name} matches no stored document")

        modes = _modes(settings)
        progress(f"running {len(questions)} questions through {', '.join(modes)}")
        items = [EvalQuery.from_question(q) for q in questions]
        retrievers: list[_Retriever] = []
        results = _evaluate_items(
            conn, settings, items, k=k, abstention=True, progress=progress, retrievers=retrievers
        )
        holdout_results: list[QueryResult] | None = None
        if holdout:
            progress(f"running {len(holdout)} held-out questions")
            holdout_items = [EvalQuery.from_question(q) for q in holdout]
            holdout_results = _evaluate_items(
                conn,
                settings,
                holdout_items,
                k=k,
                abstention=True,
                progress=progress,
                retrievers=retrievers,
            )

        calibration: dict[str, Any] | None = None
        if do_calibrate:
            rule, fitted = calibrate(
                _samples(results), max_false_positive_rate=max_false_positive_rate
            )
            calibration = {"rule": rule.describe(), "calibration_set": fitted}
            if holdout_results is not None:
                calibration["holdout"] = rule_rates(rule, _samples(holdout_results))
            rule = AbstentionRule(
                rule.clauses,
                source="calibrated",
                calibration={
                    **fitted,
                    "questions_file": str(questions_file),
                    "holdout": calibration.get("holdout"),
                    "parameters": parameters(settings),
                },
            )
            save_rule(conn, rule)
            conn.commit()
            progress(f"calibrated abstention rule stored in kb.settings: {rule.describe()}")
        else:
            rule = load_rule(conn, settings)
            conn.rollback()

    apply_abstention(results, rule)
    report: dict[str, Any] = {
        "kind": "questions",
        "questions_file": str(questions_file),
        "corpus": str(corpus_dir),
        "documents": len(uris),
        "questions": len(questions),
        "answerable": sum(q.answerable for q in questions),
        "unanswerable": sum(not q.answerable for q in questions),
        "k": k,
        "parameters": parameters(settings),
        "ingestion": ingestion,
        "retrievers": aggregate(results, k, modes),
        "reranked": _reranked_note(settings, retrievers),
        "abstention": abstention_summary(results, rule),
        "missing_sources": missing,
        "per_question": per_query(results, modes),
    }
    if holdout_results is not None and holdout_file is not None:
        apply_abstention(holdout_results, rule)
        report["holdout"] = {
            "questions_file": str(holdout_file),
            "questions": len(holdout_results),
            "retrievers": aggregate(holdout_results, k, modes),
            "abstention": abstention_summary(holdout_results, rule),
            "per_question": per_query(holdout_results, modes),
        }
    if calibration is not None:
        report["calibration"] = calibration
    return report


def questions_of(questions: Sequence[Question]) -> list[EvalQuery]:
    return [EvalQuery.from_question(q) for q in questions]


# --- BEIR -------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def beir_database_name(dataset: BeirDataset, settings: Settings) -> str:
    """``pgkb_beir_<dataset>_<model>_<dims>``, within PostgreSQL's 63-byte identifier limit."""
    model = _slug(settings.embedding_model.rsplit("/", 1)[-1])
    name = f"pgkb_beir_{dataset.name}_{model}_{settings.embedding_dims}"
    if len(name) > 63:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = name[:54] + "_" + digest
    return name


def _with_dbname(url: str, dbname: str) -> str:

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def ensure_beir_database(settings: Settings, name: str, progress: Progress) -> str:
    """The URL of database ``name`` on the configured server, created and migrated if needed,
    with the pg_textsearch keyword backend where the server loads it (as ``pgkb db upgrade``)."""
    base = database_url(settings)
    admin = connect(base, autocommit=True, register=False)
    try:
        exists = admin.execute(queries.DATABASE_EXISTS, (name,)).fetchone()
        if not exists:
            progress(f"creating database {name} for the benchmark")
            try:
                admin.execute(queries.CREATE_DATABASE.format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                raise PgkbError(
                    f"cannot create the benchmark database {name}: permission denied",
                    hint=f"create it once (CREATE DATABASE {name}) or grant CREATEDB",
                ) from None
    finally:
        admin.close()
    url = _with_dbname(base, name)
    upgrade(url)
    progress(f"keyword backend: {keyword_backend.enable(url, settings)}")
    return url


def ingest_beir(settings: Settings, dataset: BeirDataset, progress: Progress) -> dict[str, Any]:
    """Ingest the corpus into ``settings``' database: one document per entry, ``_id`` as its
    source_uri, the title as its title (the chunker puts it before every chunk's text).

    Unchanged entries (same content hash) are skipped, so a re-run costs a read of the file.
    """
    embedder = get_embedder(settings)
    total = dataset.corpus_size()
    started = time.monotonic()
    state = {"read": 0, "embedded": 0, "last": started}

    def report_progress(force: bool = False) -> None:
        now = time.monotonic()
        if force or now - state["last"] >= 5:
            state["last"] = now
            progress(
                f"ingesting: read {state['read']}/{total} documents, embedded "
                f"{state['embedded']} chunks ({now - started:.0f} s)"
            )

    def on_event(event: str, info: dict[str, Any]) -> None:
        if event == "embedded":
            state["embedded"] += int(info.get("count", 0))
            report_progress()

    def documents() -> Iterator[Any]:
        for doc in dataset.documents():
            state["read"] += 1
            report_progress()
            yield SourceDocument(
                source_uri=doc.id,
                title=doc.title or doc.id,
                text=doc.text or doc.title,
                metadata={"beir_dataset": dataset.name},
            )

    progress(f"ingesting {total} documents of {dataset.name} (unchanged ones are skipped)")
    with connection(settings) as conn:
        report = ingest_documents(
            conn, documents(), embedder, settings, progress=on_event,
            collection=_ingest_collection(settings),
        )  # fmt: skip
    report_progress(force=True)
    summary = _report_dict(report)
    failed = summary.get("failed") or []
    if failed:
        progress(f"warning: {len(failed)} documents failed, e.g. {failed[0]}")
    summary["documents"] = total
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    return summary


def evaluate_beir(
    settings: Settings,
    *,
    folder: Path,
    split: str = "test",
    qrels_file: Path | None = None,
    k: int = 5,
    max_queries: int | None = None,
    progress: Progress = _quiet,
) -> dict[str, Any]:
    """The eval over a BEIR dataset, in its own database (``qrels_file``: other judgements)."""
    dataset = load_beir(folder, split, qrels_file)
    name = beir_database_name(dataset, settings)
    url = ensure_beir_database(settings, name, progress)
    beir_settings = settings.replace(database_url=url)
    ingestion = ingest_beir(beir_settings, dataset, progress)

    query_ids = list(dataset.queries)
    if max_queries is not None:
        query_ids = query_ids[:max_queries]
    items = [
        EvalQuery(qid, dataset.queries[qid], "beir", dataset.qrels[qid], suffix_match=False)
        for qid in query_ids
    ]
    modes = _modes(settings)
    progress(f"running {len(items)} queries through {', '.join(modes)}")
    retrievers: list[_Retriever] = []
    with connection(beir_settings) as conn:
        results = _evaluate_items(
            conn,
            beir_settings,
            items,
            k=k,
            abstention=True,
            progress=progress,
            retrievers=retrievers,
        )
        rule = load_rule(conn, beir_settings)
        conn.rollback()
    # every judged query is answerable by construction: the gate's false-flag rate on them
    apply_abstention(results, rule)
    figures = aggregate(results, k, modes)
    for entry in figures.values():
        entry.pop("by_kind", None)
    return {
        "kind": "beir",
        "dataset": dataset.name,
        "path": str(dataset.path),
        "qrels": str(dataset.qrels_file),
        "database": name,
        "documents": ingestion.get("documents"),
        "queries": len(items),
        "k": k,
        "parameters": parameters(settings),
        "ingestion": ingestion,
        "retrievers": figures,
        "reranked": _reranked_note(settings, retrievers),
        "abstention": abstention_summary(results, rule),
        "per_query": per_query(results, modes),
    }
