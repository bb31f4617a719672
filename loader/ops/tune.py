"""``pgkb models tune``: fine-tune the active local model on the knowledge base's own text,
compare it with the active one on the user's question sets, activate it only when it wins.

1. read the passages (``kb.training_passages``) and build the training pairs
   (:mod:`loader.ops.tune_pairs`): unlabelled from the corpus's structure, labelled from a
   question file (``--pairs``) or a BEIR training split (``--beir``); every pair resembling a
   question of the gate's sets is held out;
2. train (:mod:`loader.ops.tune_train`) into a new model folder with its provenance; the folder
   is named by a digest of the request, so the same request finds its model already trained;
3. register the folder as a new model beside the active one and embed every chunk with it
   (:func:`loader.ops.models.reembed`: committed batches, resumable);
4. the gate: every question set run through the vector, keyword and hybrid retrievers with the
   active model and with the tuned one; the tuned model is activated only when no set shows a
   loss by the eval gate's rules (:func:`loader.evaluation.gate.compare`: no relevant document
   leaving the top k, no summed per-question loss past the tolerance). Otherwise, or without
   any question set, it stays registered and inactive, and the comparison is reported.

A tuned model is a new model: its own name (its folder), its own vectors and index, never mixed
with its base's. Until the gate activates it, the active model serves every search; an
interruption at any step leaves it so. One tune runs at a time per data folder (:data:`LOCK`):
a second is refused with an error naming the first's process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.db.session import connection
from loader.errors import ConfigError, PgkbError
from loader.evaluation.gate import Finding, compare, snapshot
from loader.evaluation.harness import evaluate_questions
from loader.evaluation.questions import load_questions
from loader.ingest.chunking import Chunker
from loader.ops.models import (
    Model,
    ProgressCallback,
    ReembedReport,
    activate,
    add_model,
    embed_text,
    find_model,
    list_models,
    model_settings,
    reembed,
)
from loader.ops.tune_pairs import (
    Pair,
    beir_pairs,
    counts,
    digest,
    hard_negatives,
    hold_out,
    negative_counts,
    normalise,
    question_pairs,
    structure_pairs,
    training_subset,
)
from loader.ops.tune_train import TrainOptions, read_provenance, request_digest, train
from loader.providers.embeddings import chunk_size, get_embedder
from loader.providers.local import model_folder
from loader.settings import Settings

MIN_PAIRS = 8
"""Fewer training pairs than this teach nothing: the command stops before training."""
PAGE = 2000
NEAR_MISS_DEPTH = 10
"""BM25 hits read for each anchor when looking for its near-miss negative."""
NEAR_MISS_PAGE = 200


@dataclasses.dataclass
class SetComparison:
    """One question set run with the base and the tuned model."""

    name: str
    questions: int
    base: dict[str, dict[str, float]]
    tuned: dict[str, dict[str, float]]
    findings: list[str]

    @property
    def passed(self) -> bool:
        return not self.findings


@dataclasses.dataclass
class TuneReport:
    base: str
    model: str
    folder: str
    dims: int
    trained: bool
    """False: the folder held this request's model already (a re-run)."""
    pairs: dict[str, int]
    held_out: int
    negatives: dict[str, int]
    """The hard negatives of each kind (``section``, ``near-miss``)."""
    available: int
    """The pairs built; at most steps x batch size of them are trained on (``pairs``)."""
    steps: int
    seconds: float | None
    peak_rss_mb: float | None
    reembed: dict[str, Any] | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    """Wall-clock seconds of this run's steps: ``pairs`` (with the near-miss searches),
    ``train`` (0 when the folder held the model), ``reembed``, ``gate``."""
    sets: list[SetComparison] = dataclasses.field(default_factory=list)
    activated: bool = False
    verdict: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["sets"] = [{**dataclasses.asdict(s), "passed": s.passed} for s in self.sets]
        return data


@dataclasses.dataclass(frozen=True)
class PairSources:
    """Where the training pairs come from."""

    structure: bool | None = None
    """Unlabelled pairs from the corpus; None: only when no labelled source is given."""
    pairs_file: Path | None = None
    beir_dir: Path | None = None
    beir_split: str = "train"
    beir_qrels: Path | None = None
    negatives: bool = True
    """A hard negative with each pair (the same document's other section, BM25's near miss)."""


def read_passages(conn: psycopg.Connection[Any]) -> list[queries.TrainingPassage]:
    """Every passage of the knowledge base (the connection's collections), by chunk id."""
    found: list[queries.TrainingPassage] = []
    after = 0
    while True:
        with conn.cursor(row_factory=class_row(queries.TrainingPassage)) as cur:
            rows = cur.execute(queries.TRAINING_PASSAGES, (after, PAGE)).fetchall()
        if not rows:
            break
        found += rows
        after = rows[-1].chunk_id
    conn.rollback()
    return found


def corpus_digest(passages: Sequence[queries.TrainingPassage]) -> str:
    """sha256 over the passages' sources, places and texts, in a fixed order."""
    hasher = hashlib.sha256()
    for p in sorted(passages, key=lambda p: (p.source_uri, p.chunk_index)):
        hasher.update(f"{p.source_uri}\x00{p.chunk_index}\x00".encode())
        hasher.update(hashlib.sha256(p.content.encode()).digest())
    return hasher.hexdigest()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name.rstrip("/").rsplit("/", 1)[-1]).strip("-.")


def build_pairs(
    passages: Sequence[queries.TrainingPassage],
    render: Callable[[queries.TrainingPassage], str],
    sources: PairSources,
    held_questions: Sequence[str],
    *,
    seed: int,
) -> tuple[list[Pair], int, list[str]]:
    """The training pairs of every source, held apart from ``held_questions``; the number
    held out and the notes (sources naming no stored document) to show."""
    labelled = sources.pairs_file is not None or sources.beir_dir is not None
    structure = sources.structure if sources.structure is not None else not labelled
    pairs: list[Pair] = []
    notes: list[str] = []
    if sources.pairs_file is not None:
        found, missing = question_pairs(load_questions(sources.pairs_file), passages, render)
        pairs += found
        if missing:
            notes.append(
                f"{len(missing)} source(s) of {sources.pairs_file} name no stored document "
                f"(their pairs are skipped): {', '.join(missing[:5])}"
            )
    if sources.beir_dir is not None:
        found, _ = beir_pairs(
            sources.beir_dir, split=sources.beir_split, qrels_file=sources.beir_qrels
        )
        pairs += found
    if structure:
        pairs += structure_pairs(passages, render, seed=seed)
    kept, held = hold_out(pairs, held_questions)
    return kept, held, notes


def near_misses(
    conn: psycopg.Connection[Any], anchors: Sequence[str], *, depth: int = NEAR_MISS_DEPTH
) -> dict[str, list[int]]:
    """The keyword retriever's best ``depth`` chunk ids for each anchor (by rank), keyed by the
    anchor as :func:`normalise` gives it (its words only, so no quote or minus sign of a
    sentence becomes a search operator)."""
    texts = sorted({normalise(a) for a in anchors} - {""})
    found: dict[str, list[int]] = {t: [] for t in texts}
    for start in range(0, len(texts), NEAR_MISS_PAGE):
        page = texts[start : start + NEAR_MISS_PAGE]
        for ord_, chunk_id in conn.execute(queries.NEAR_MISSES, (page, depth)).fetchall():
            found[page[ord_ - 1]].append(int(chunk_id))
    conn.rollback()
    return found


def _renderer(settings: Settings) -> Callable[[queries.TrainingPassage], str]:
    """What the model reads for a passage at search time (the chunker's prefix + content)."""
    embedder = get_embedder(settings)
    chunker = Chunker(
        embedder,
        chunk_size(settings, embedder),
        settings.chunk_overlap,
        embed_heading_path=settings.embed_heading_path,
    )
    return lambda p: embed_text(chunker, p.title, p.heading_path, p.content)


def _base_model(conn: psycopg.Connection[Any]) -> Model:
    active = next((m for m in list_models(conn) if m.is_active), None)
    if active is None:
        raise PgkbError(
            "the knowledge base has no active embedding model to tune",
            hint="pgkb ingest FOLDER first: it registers the configured model",
        )
    if active.provider != "local":
        raise ConfigError(
            f"the active model {active.name} is an API model ({active.provider}): only a local "
            "(sentence-transformers) model can be tuned here",
            hint="register and activate a local model first (pgkb models add NAME --provider "
            "local), or tune where that model runs",
        )
    return active


def _figures(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {
        mode: {k: v for k, v in entry["overall"].items() if "@" in k}
        for mode, entry in report["retrievers"].items()
    }


def _gate_snapshot(report: dict[str, Any]) -> dict[str, Any]:
    """The eval gate's view of a report, retrieval only: the abstention verdicts use the
    active model's similarity profile and rule, so they say nothing of another model until it
    is active and recalibrated (``pgkb eval --calibrate``)."""
    shot = snapshot(report, k=int(report["k"]), parameters={})
    for row in shot["per_question"].values():
        row.pop("abstain", None)
    return shot


def compare_sets(
    base: Settings,
    tuned: Settings,
    question_files: Sequence[Path],
    *,
    k: int = 5,
    progress: Callable[[str], None] | None = None,
) -> list[SetComparison]:
    """Every question set with the base and the tuned model, and the gate's findings."""
    say = progress or (lambda _: None)
    results = []
    for file in question_files:
        say(f"gate: {file} with the active model")
        before = evaluate_questions(base, questions_file=file, corpus=None, k=k, ingest=False)
        say(f"gate: {file} with the tuned model")
        after = evaluate_questions(tuned, questions_file=file, corpus=None, k=k, ingest=False)
        name = file.stem
        findings: list[Finding] = compare(name, _gate_snapshot(before), _gate_snapshot(after))
        results.append(
            SetComparison(
                name,
                int(before["questions"]),
                _figures(before),
                _figures(after),
                [f.message for f in findings if f.fails],
            )
        )
    return results


def tune(
    settings: Settings,
    sources: PairSources,
    options: TrainOptions,
    *,
    question_files: Sequence[Path] = (),
    output: Path | None = None,
    force_activate: bool = False,
    progress: ProgressCallback | None = None,
    say: Callable[[str], None] | None = None,
) -> TuneReport:
    """Tune the active local model on the knowledge base's text (and the labelled sources),
    register and fill the result beside it, gate it on ``question_files`` and activate it
    only when it loses on none of them (or whatever the gate says with ``force_activate``)."""
    tell = say or (lambda _: None)
    with _one_tune_at_a_time(settings.data_dir / "models"):
        return _tune(settings, sources, options, question_files, output, force_activate,
                     progress, tell)  # fmt: skip


LOCK = "tune.lock"
"""The file in ``<data_dir>/models`` a running tune holds locked (``flock``): the lock goes with
its process, however it ends, so a killed tune leaves nothing to clean up."""


@contextlib.contextmanager
def _one_tune_at_a_time(folder: Path) -> Iterator[None]:
    """Hold the tune lock of ``folder``, or refuse at once: two tunes would train into the
    same checkpoints and remove each other's files."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    with path.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise PgkbError(
                f"another pgkb models tune is running with the data folder {folder.parent} "
                f"(process {holder})",
                hint="wait for it to end (or stop it: its checkpoints let it resume later), "
                "then run this tune again",
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _tune(
    settings: Settings,
    sources: PairSources,
    options: TrainOptions,
    question_files: Sequence[Path],
    output: Path | None,
    force_activate: bool,
    progress: ProgressCallback | None,
    tell: Callable[[str], None],
) -> TuneReport:
    clock = time.monotonic()
    timings: dict[str, float] = {}

    def lap(step: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[step] = round(now - clock, 1)
        clock = now

    held_questions = [q.question for f in question_files for q in load_questions(f)]
    with connection(settings) as conn:
        base = _base_model(conn)
        passages = read_passages(conn)
    if not passages:
        raise PgkbError(
            "the knowledge base holds no passages to tune on",
            hint="pgkb ingest FOLDER first (or check --collection)",
        )
    base_settings = model_settings(settings, base)
    base_folder = model_folder(base.name)
    render = _renderer(base_settings)
    pairs, held, notes = build_pairs(passages, render, sources, held_questions, seed=options.seed)
    for note in notes:
        tell(f"warning: {note}")
    _enough(pairs, held)
    available = len(pairs)
    pairs = training_subset(pairs, options.steps(available) * options.batch_size, seed=options.seed)
    without_negative = 0
    if sources.negatives:
        tell(f"hard negatives: BM25 near misses of {len(pairs)} anchors")
        with connection(settings) as conn:
            found = near_misses(conn, [p.anchor for p in pairs])
        pairs, without_negative = hard_negatives(pairs, passages, found, render, seed=options.seed)
        _enough(pairs, held, without_negative)
    lap("pairs")
    pairs_digest = digest(pairs)
    identity = {"name": base.name, "dims": base.dims, "config": dict(base.config)}
    request = request_digest(identity, pairs_digest, options)
    folder = output or settings.data_dir / "models" / f"{_slug(base.name)}-tuned-{request[:12]}"
    folder = folder.expanduser().resolve()
    tell(
        f"{len(pairs)} training pairs ("
        + ", ".join(f"{kind} {n}" for kind, n in counts(pairs).items())
        + f") of {available}; {held} held out as eval questions; "
        + (
            "hard negatives: "
            + ", ".join(f"{kind} {n}" for kind, n in negative_counts(pairs).items())
            + f" ({without_negative} pairs without one dropped); "
            if sources.negatives
            else ""
        )
        + f"{options.steps(len(pairs))} steps"
    )
    provenance = read_provenance(folder)
    trained = False
    if provenance is None or provenance.get("request", {}).get("digest") != request:
        provenance = train(
            base_folder,
            pairs,
            folder,
            options,
            provenance={
                "format": 1,
                "request": {"digest": request},
                "base_model": identity,
                "base_folder": str(base_folder),
                "corpus_digest": corpus_digest(passages),
                "passages": len(passages),
                "pairs": {
                    "count": len(pairs),
                    "available": available,
                    "kinds": counts(pairs),
                    "negatives": negative_counts(pairs),
                    "without_negative": without_negative,
                    "digest": pairs_digest,
                    "held_out": held,
                    "sources": _source_names(sources),
                },
            },
            query_prompt=base_settings.embedding_query_prompt or "",
            document_prompt=base_settings.embedding_document_prompt or "",
            progress=progress,
            say=tell,
        )
        trained = True
    else:
        tell(f"{folder} holds this request's tuned model already: not trained again")
    lap("train")
    training = provenance.get("training") or {}
    report = TuneReport(
        base=base.name,
        model=str(folder),
        folder=str(folder),
        dims=base.dims,
        trained=trained,
        pairs=counts(pairs),
        held_out=held,
        negatives=negative_counts(pairs),
        available=available,
        steps=int(provenance.get("steps") or 0),
        seconds=training.get("seconds"),
        peak_rss_mb=training.get("peak_rss_mb"),
    )
    with connection(settings) as conn:
        registered = any(m.name == str(folder) and m.dims == base.dims for m in list_models(conn))
        if not registered:
            add_model(
                conn,
                str(folder),
                base.dims,
                "local",
                max_input_tokens=base.config.get("max_input_tokens"),
                query_prompt=base_settings.embedding_query_prompt,
                document_prompt=base_settings.embedding_document_prompt,
            )
    filled: ReembedReport = reembed(settings, str(folder), dims=base.dims, progress=progress)
    report.reembed = filled.to_dict()
    lap("reembed")
    with connection(settings) as conn:
        tuned_model = find_model(conn, str(folder), base.dims)
    tuned_settings = model_settings(settings, tuned_model)
    report.sets = compare_sets(base_settings, tuned_settings, question_files, progress=tell)
    lap("gate")
    report.timings = timings
    lost = [s.name for s in report.sets if not s.passed]
    if not question_files:
        report.verdict = "no question set to gate it (--questions FILE)"
    elif lost:
        report.verdict = f"it loses on {', '.join(lost)}"
    else:
        report.verdict = f"no loss on {len(report.sets)} question set(s)"
    if force_activate or (question_files and not lost):
        with connection(settings) as conn:
            activate(conn, str(folder), base.dims)
        report.activated = True
        report.verdict += (
            ": activated" if question_files and not lost else ": activated as asked (--activate)"
        )
    elif question_files:
        report.verdict += f": left inactive, {base.name} stays active"
    else:
        report.verdict += (
            f": left inactive; compare with `pgkb eval --model {folder}` and activate by hand "
            "(or tune with --activate)"
        )
    return report


def _enough(pairs: Sequence[Pair], held: int, without_negative: int = 0) -> None:
    if len(pairs) < MIN_PAIRS:
        dropped = f", {without_negative} without a hard negative" if without_negative else ""
        raise PgkbError(
            f"only {len(pairs)} training pair(s) could be built ({held} held out as eval "
            f"questions{dropped}): at least {MIN_PAIRS} are needed",
            hint="ingest more text, or give labelled pairs (--pairs FILE, --beir DIR)"
            + (", or tune with --no-hard-negatives" if without_negative else ""),
        )


def _source_names(sources: PairSources) -> list[str]:
    labelled = sources.pairs_file is not None or sources.beir_dir is not None
    names = []
    if sources.pairs_file is not None:
        names.append(f"pairs:{sources.pairs_file.name}")
    if sources.beir_dir is not None:
        qrels = sources.beir_qrels.name if sources.beir_qrels else sources.beir_split
        names.append(f"beir:{sources.beir_dir.name}:{qrels}")
    if sources.structure or (sources.structure is None and not labelled):
        names.append("structure")
    return names
