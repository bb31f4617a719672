"""``pgkb eval``: measured retrieval quality, on our questions or on a BEIR dataset."""

from __future__ import annotations

from pathlib import Path

import click

from loader.cli.base import App, emit_json
from loader.cli.filters import collection_option, joined
from loader.errors import PgkbError
from loader.evaluation.questions import default_holdout_file, default_questions_file
from loader.safety import echo


@click.command("eval")
@click.option(
    "--questions",
    "questions_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Question file (JSON list of {id, question, kind, sources}); "
    "default: eval/questions.json.",
)
@click.option(
    "--corpus",
    type=click.Path(path_type=Path),
    help="Folder (or file) the questions are about, ingested first; default: the bundled sample.",
)
@click.option(
    "--beir",
    "beir_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Evaluate on a BEIR dataset folder instead (corpus.jsonl, queries.jsonl, qrels.tsv), "
    "ingested into its own database pgkb_beir_<dataset>_<model> on the same server.",
)
@click.option(
    "--split", default="test", show_default=True, help="BEIR qrels/<split>.tsv when no qrels.tsv."
)
@click.option(
    "--qrels",
    "qrels_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --beir: judgements to use instead of the dataset's (only the queries they judge "
    "are run), e.g. eval/scifact/train-tune.tsv.",
)
@click.option("--k", "k", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Cut-off of recall@k (MRR and nDCG are at 10).")  # fmt: skip
@click.option(
    "--calibrate",
    is_flag=True,
    help="Derive the abstention rule from the questions and store it in kb.settings.",
)
@click.option(
    "--holdout",
    "holdout_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Held-out questions, reported beside the main set (default with the bundled "
    "questions: eval/questions-holdout.json).",
)
@click.option(
    "--max-false-flags",
    type=click.FloatRange(0, 1),
    default=0.05,
    show_default=True,
    help="With --calibrate: the largest share of answerable questions the rule may flag.",
)
@click.option(
    "--max-queries",
    type=click.IntRange(1),
    help="With --beir: evaluate only the first N judged queries.",
)
@click.option("--no-ingest", is_flag=True, help="Evaluate what the knowledge base holds as is.")
@click.option("--model", "model_name", help="Evaluate a registered (re-embedded) model, not the "
              "active one; implies --no-ingest (pgkb models list).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--check-baseline",
    is_flag=True,
    help="Compare every set of the run with the recorded baseline (the eval gate); exit code 1 "
    "naming the questions that moved when it fails.",
)
@click.option(
    "--record-baseline",
    is_flag=True,
    help="Record the run's sets in the baseline; refused when that would lower it.",
)
@click.option(
    "--accept-lower",
    metavar="REASON",
    help="With --record-baseline: record a lower baseline; REASON is stored in the file.",
)
@click.option(
    "--baseline",
    "baseline_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Baseline file of --check-baseline / --record-baseline (default: eval/baseline.json).",
)
@click.option(
    "--set",
    "set_name",
    metavar="NAME",
    help="Name of the question set in the baseline (default: 'bundled' for the bundled "
    "questions, else the file name; the held-out set is NAME-holdout).",
)
@collection_option
@click.pass_obj
def eval_command(
    app: App,
    questions_file: Path | None,
    corpus: Path | None,
    beir_dir: Path | None,
    split: str,
    qrels_file: Path | None,
    k: int,
    calibrate: bool,
    holdout_file: Path | None,
    max_false_flags: float,
    max_queries: int | None,
    no_ingest: bool,
    model_name: str | None,
    as_json: bool,
    check_baseline: bool,
    record_baseline: bool,
    accept_lower: str | None,
    baseline_file: Path | None,
    set_name: str | None,
    collections: tuple[str, ...],
) -> None:
    """Run retrieval only (no generation) for every question through the vector, keyword and
    hybrid retrievers; report recall@k, MRR@10 and nDCG@10 overall and per kind, and the
    abstention gate's hit rates. Progress goes to stderr.

    \b
    pgkb eval                              # bundled questions over the bundled sample corpus
    pgkb eval --calibrate                  # ... and recompute the abstention rule
    pgkb eval --questions q.json --corpus ./docs
    pgkb eval --beir ../datasets/scifact --json
    pgkb eval --beir ../datasets/scifact-train --qrels eval/scifact/train-tune.tsv
    pgkb eval --check-baseline             # the eval gate: exit code 1 on a regression
    pgkb eval --record-baseline [--accept-lower "reason"]

    Exit codes: 0 success, 1 the eval gate failed (or recording would lower the baseline),
    2 bad input or configuration.
    """
    from loader.evaluation.harness import evaluate_beir, evaluate_questions
    from loader.evaluation.report import render

    if check_baseline and record_baseline:
        raise PgkbError(
            "--check-baseline and --record-baseline cannot be combined",
            hint="check first; record once the change is meant",
        )
    if accept_lower is not None and not record_baseline:
        raise PgkbError("--accept-lower only applies with --record-baseline")
    settings = app.settings(collections=joined(collections))
    if model_name is not None:  # compare a model before switching to it
        from loader.ops.models import settings_for_model

        settings, no_ingest = settings_for_model(settings, model_name), True

    def progress(message: str) -> None:
        echo(message, err=True)

    if beir_dir is not None:
        if questions_file or corpus or calibrate or holdout_file:
            raise PgkbError(
                "--beir cannot be combined with --questions, --corpus, --calibrate or --holdout",
                hint="run the BEIR evaluation and the question evaluation separately",
            )
        report = evaluate_beir(
            settings,
            folder=beir_dir,
            split=split,
            qrels_file=qrels_file,
            k=k,
            max_queries=max_queries,
            progress=progress,
        )
    else:
        if qrels_file is not None:
            raise PgkbError("--qrels needs --beir", hint="pass the BEIR dataset folder with --beir")
        bundled = questions_file is None
        questions = questions_file or default_questions_file()
        holdout = holdout_file
        if holdout is None and bundled and corpus is None and default_holdout_file().is_file():
            holdout = default_holdout_file()
        report = evaluate_questions(
            settings,
            questions_file=questions,
            corpus=corpus,
            k=k,
            do_calibrate=calibrate,
            holdout_file=holdout,
            max_false_positive_rate=max_false_flags,
            ingest=not no_ingest,
            progress=progress,
        )
    if set_name:
        report["set"] = set_name
    from loader.evaluation import baseline as gate_baseline

    path = baseline_file or gate_baseline.BASELINE_FILE
    verdict = gate_baseline.check([report], path) if check_baseline else None
    if verdict is not None:
        report["gate"] = verdict.to_dict()
    if as_json:
        emit_json(report)
    else:
        echo(render(report))
        if verdict is not None:
            echo()
            echo(verdict.render(path))
    if verdict is not None and not verdict.ok:
        raise gate_baseline.GateFailed(
            f"the eval gate failed: {len(verdict.failed)} problem(s), listed above"
        )
    if record_baseline:
        _, lowered = gate_baseline.record([report], path, accept_lower=accept_lower)
        names = ", ".join(gate_baseline.report_sets(report))
        echo(f"recorded {names} in {path}", err=True)
        if lowered:
            echo(f"recorded lower, accepted: {accept_lower}", err=True)
