"""``pgkb models ...``: add an embedding model, fill it (``reembed``), switch to it without
downtime."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from loader.cli.base import App, emit_json
from loader.errors import PgkbError
from loader.safety import echo


@click.group()
def models() -> None:
    """Embedding models: list, add, reembed (fill a new model), tune, activate, drop."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def models_list(app: App, as_json: bool) -> None:
    """The registered models with their coverage: embeddings stored, chunks missing, index."""
    from loader.db.session import connection
    from loader.ops.models import list_models

    with connection(app.settings(), read=True) as conn:
        found = list_models(conn)
    if as_json:
        emit_json([m.to_dict() for m in found])
        return
    if not found:
        echo("no embedding model is registered (pgkb ingest registers the configured one)")
        return
    for m in found:
        state = "active" if m.is_active else "      "
        index = m.index_name or "no index"
        if m.index_name and not m.index_valid:
            index += " (INVALID)"
        echo(
            f"{state}  {m.name} ({m.dims} dims, {m.provider}): {m.embeddings} embeddings, "
            f"{m.missing} chunks missing; {index}"
        )


@models.command("add")
@click.argument("name")
@click.option("--dims", type=click.IntRange(1, 16000), required=True, help="Vector dimensions.")
@click.option(
    "--provider",
    type=click.Choice(["local", "openai"]),
    required=True,
    help="local (sentence-transformers) or openai (any OpenAI-compatible API).",
)
@click.option("--base-url", help="Base URL of the OpenAI-compatible embeddings API.")
@click.option("--max-input-tokens", type=click.IntRange(1), help="The model's input limit.")
@click.option(
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding its API key (the key is never stored).",
)
@click.option(
    "--query-prompt",
    help="Put before every query, e.g. 'query: ' (default: a local model's own; else none).",
)
@click.option(
    "--document-prompt",
    help="Put before every passage, e.g. 'passage: ' (default: a local model's own; else none).",
)
@click.option(
    "--request-dimensions",
    is_flag=True,
    help="Send --dims as the API request's 'dimensions' (OpenAI text-embedding-3, ...).",
)
@click.option("--hnsw-m", type=click.IntRange(2, 100), help="HNSW m (default: the setting).")
@click.option(
    "--hnsw-ef-construction",
    type=click.IntRange(4, 1000),
    help="HNSW ef_construction (default: the setting).",
)
@click.pass_obj
def models_add(
    app: App,
    name: str,
    dims: int,
    provider: str,
    base_url: str | None,
    max_input_tokens: int | None,
    api_key_env: str | None,
    query_prompt: str | None,
    document_prompt: str | None,
    request_dimensions: bool,
    hnsw_m: int | None,
    hnsw_ef_construction: int | None,
) -> None:
    """Register model NAME beside the active one (then: pgkb models reembed --model NAME)."""
    from loader.db.session import connection
    from loader.ops.models import add_model

    settings = app.settings()
    with connection(settings) as conn:
        model = add_model(
            conn,
            name,
            dims,
            provider,
            base_url=base_url,
            max_input_tokens=max_input_tokens,
            api_key_env=api_key_env,
            query_prompt=query_prompt,
            document_prompt=document_prompt,
            request_dimensions=request_dimensions,
            hnsw_m=hnsw_m or settings.hnsw_m,
            hnsw_ef_construction=hnsw_ef_construction or settings.hnsw_ef_construction,
        )
    echo(
        f"registered {model.name} ({model.dims} dims, {model.provider})"
        + (" as the active model" if model.is_active else f"; {model.missing} chunks to embed")
    )
    if not model.is_active and model.missing:
        echo(f"next: pgkb models reembed --model {model.name}", err=True)


@models.command("activate")
@click.argument("name")
@click.option("--dims", type=click.IntRange(1, 16000), help="When NAME has several.")
@click.pass_obj
def models_activate(app: App, name: str, dims: int | None) -> None:
    """Make NAME the active model, atomically (refused while chunks lack its embeddings).

    Searches that do not name a model use it from the next statement. Configure pgkb with the
    same model (PGKB_EMBEDDING_MODEL, ..._DIMS, ..._PROVIDER) so queries are embedded with it.
    """
    from loader.db.session import connection
    from loader.ops.models import activate

    with connection(app.settings()) as conn:
        model = activate(conn, name, dims)
    echo(f"{model.name} ({model.dims} dims) is the active model")


@models.command("drop")
@click.argument("name")
@click.option("--dims", type=click.IntRange(1, 16000), help="When NAME has several.")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.pass_obj
def models_drop(app: App, name: str, dims: int | None, yes: bool) -> None:
    """Remove model NAME with its embeddings and index (refused for the active model)."""
    from loader.db.session import connection
    from loader.ops.models import drop, find_model

    with connection(app.settings()) as conn:
        model = find_model(conn, name, dims)
        if not yes:
            click.confirm(
                f"Drop {model.name} ({model.dims} dims) and its {model.embeddings} embeddings?",
                abort=True,
            )
        removed = drop(conn, model.name, model.dims)
    echo(f"dropped {model.name} ({model.dims} dims) and {removed} embeddings")


class _Bar:
    """A click progress bar on a terminal, fed by reembed's progress events."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.bar: Any = None

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "waiting":
            echo(f"{info['holder']} holds the ingestion lock; waiting for it", err=True)
        elif event == "start" and self.tty:
            self.bar = click.progressbar(
                length=int(info["total"]),
                label=f"embedding with {info['model']}",
                file=sys.stderr,
            )
            self.bar.__enter__()
        elif event == "batch" and self.bar is not None:
            self.bar.update(int(info["count"]))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.render_finish()
            self.bar = None


@click.command()
@click.option("--model", "model_name", required=True, help="The registered model to fill.")
@click.option("--dims", type=click.IntRange(1, 16000), help="When the name has several.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100000),
    help="Chunks per committed batch (default: 4 x embedding_batch_size).",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="When an ingest or reembed runs: wait for it, or exit at once (code 2).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def reembed(
    app: App,
    model_name: str,
    dims: int | None,
    batch_size: int | None,
    wait: bool,
    as_json: bool,
) -> None:
    """Embed every chunk lacking a vector of MODEL, beside the active model.

    Searches keep using the active model meanwhile. Batches are committed as they go, so an
    interrupted run resumes where it stopped. Holds the ingestion lock: never runs beside an
    ingest or another reembed. Then: pgkb eval --model MODEL, pgkb models activate MODEL.
    """
    from loader.ops.models import reembed as run_reembed

    bar = _Bar(sys.stderr.isatty() and not as_json)
    try:
        report = run_reembed(
            app.settings(), model_name, dims=dims, batch_size=batch_size, wait=wait, progress=bar
        )
    finally:
        bar.close()
    if as_json:
        emit_json(report.to_dict())
        return
    built = ""
    if report.index_was_missing and report.index_rebuilt:
        built = "; built its missing HNSW index (a stopped run had dropped it)"
    elif report.index_rebuilt:
        built = "; its HNSW index was built after the bulk load"
    echo(
        f"{report.model} ({report.dims} dims): {report.embedded} chunks embedded, "
        f"{report.remaining} missing{built}"
    )
    if report.remaining == 0:
        echo(
            f"next: pgkb eval --model {report.model}; pgkb models activate {report.model}", err=True
        )


class _TuneBar(_Bar):
    """:class:`_Bar` for ``pgkb models tune``: the training steps, then the re-embedding."""

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "train-start":
            if info.get("resume"):
                echo("resuming the training from its last checkpoint", err=True)
            if self.tty:
                self.bar = click.progressbar(
                    length=int(info["steps"]), label="training", file=sys.stderr
                )
                self.bar.__enter__()
            self.step = 0
        elif event == "train-step":
            step = int(info["step"])
            if self.bar is not None:
                self.bar.update(step - self.step)
            elif step == int(info["steps"]) or step % 50 == 0:
                echo(f"training: step {step} of {info['steps']}", err=True)
            self.step = step
            if step == int(info["steps"]):
                self.close()
        else:
            super().__call__(event, info)


@click.command("tune")
@click.option(
    "--questions",
    "question_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A question set of this knowledge base (the eval's format) for the gate; repeat for "
    "each (e.g. both halves). Their questions are held out of the training pairs. Without "
    "any, the tuned model is left inactive.",
)
@click.option(
    "--pairs",
    "pairs_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Labelled pairs: questions with their source documents, the eval's question format.",
)
@click.option(
    "--beir",
    "beir_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Labelled pairs from a BEIR dataset's training judgements (corpus.jsonl, "
    "queries.jsonl, qrels).",
)
@click.option("--split", default="train", show_default=True, help="With --beir: qrels/<split>.tsv.")
@click.option(
    "--qrels",
    "qrels_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --beir: the judgements to train on instead of the dataset's.",
)
@click.option(
    "--structure/--no-structure",
    default=None,
    help="Unlabelled pairs from the knowledge base's headings, titles and passages "
    "(default: only when neither --pairs nor --beir is given).",
)
@click.option(
    "--hard-negatives/--no-hard-negatives",
    default=True,
    show_default=True,
    help="Give each pair a hard negative: another section of the same document, or a passage "
    "of another document the keyword retriever (BM25) ranks high for the anchor.",
)
@click.option(
    "--activate",
    "force_activate",
    is_flag=True,
    help="Activate the tuned model whatever the gate says (it still runs and reports).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same model.")
@click.option("--epochs", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option(
    "--max-steps",
    type=click.IntRange(1),
    default=100,  # TrainOptions' (a test checks)
    show_default=True,
    help="At most this many training steps (bounds the time).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(2, 1024),
    default=16,  # TrainOptions' (a test checks)
    show_default=True,
    help="Pairs per step; each anchor's negatives are the batch's other passages.",
)
@click.option(
    "--max-seq-length",
    type=click.IntRange(16, 8192),
    default=128,  # TrainOptions' (a test checks)
    show_default=True,
    help="Tokens read of each text while training (with --batch-size, bounds the memory).",
)
@click.option(
    "--learning-rate",
    type=click.FloatRange(0, 1, min_open=True),
    default=2e-5,  # TrainOptions' (a test checks)
    show_default=True,
)
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="The tuned model's folder (default: <data_dir>/models/<base>-tuned-<digest>).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def models_tune(
    app: App,
    question_files: tuple[Path, ...],
    pairs_file: Path | None,
    beir_dir: Path | None,
    split: str,
    qrels_file: Path | None,
    structure: bool | None,
    hard_negatives: bool,
    force_activate: bool,
    seed: int,
    epochs: int,
    max_steps: int,
    batch_size: int,
    max_seq_length: int,
    learning_rate: float,
    output: Path | None,
    as_json: bool,
) -> None:
    """Fine-tune the active local model on this knowledge base's text; activate it only when
    it loses on none of the --questions sets.

    Trains a copy of the active model (contrastive loss, in-batch and hard negatives, on the
    CPU) on pairs built from the knowledge base itself (a heading path with its section, a
    title with its lead, a sentence with the passage it comes from) and on --pairs / --beir,
    each with a hard negative (another section of its document, a BM25 near miss), saves it as
    a new model folder with its provenance (pgkb-tune.json), registers it, embeds every chunk
    with it beside the active model, then runs each question set with both models: no
    relevant document may leave a retriever's top 5 and no summed loss may pass the eval
    gate's tolerance. Otherwise the tuned model stays registered and inactive (pgkb models
    activate NAME, pgkb models drop NAME), unless --activate asks for it anyway. The active
    model serves searches throughout (Ctrl-C included); an interrupted run resumes (training
    from its checkpoint, re-embedding where it stopped).
    """
    from loader.ops.tune import PairSources, tune
    from loader.ops.tune_train import TrainOptions

    if qrels_file is not None and beir_dir is None:
        raise PgkbError("--qrels needs --beir", hint="pass the BEIR dataset folder with --beir")
    if structure is False and pairs_file is None and beir_dir is None:
        raise PgkbError(
            "--no-structure leaves nothing to train on",
            hint="give labelled pairs with --pairs FILE or --beir DIR",
        )
    options = TrainOptions(
        seed=seed,
        epochs=epochs,
        max_steps=max_steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_seq_length=max_seq_length,
    )
    sources = PairSources(structure, pairs_file, beir_dir, split, qrels_file, hard_negatives)
    bar = _TuneBar(sys.stderr.isatty() and not as_json)
    try:
        report = tune(
            app.settings(),
            sources,
            options,
            question_files=question_files,
            output=output,
            force_activate=force_activate,
            progress=bar,
            say=lambda message: echo(message, err=True),
        )
    except KeyboardInterrupt:
        bar.close()
        echo(
            "interrupted: the active model still serves every search; run the same command "
            "again to resume",
            err=True,
        )
        raise SystemExit(130) from None
    finally:
        bar.close()
    if as_json:
        emit_json(report.to_dict())
        return
    for compared in report.sets:
        echo(f"{compared.name} ({compared.questions} questions):")
        for mode in compared.base:
            before, after = compared.base[mode], compared.tuned.get(mode, {})
            figures = ", ".join(
                f"{metric} {value:.3f} -> {after.get(metric, float('nan')):.3f}"
                for metric, value in before.items()
            )
            echo(f"  {mode}: {figures}")
        for finding in compared.findings:
            echo(f"  LOSS {finding}")
    if report.timings:
        echo(
            "time: "
            + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in report.timings.items()),
            err=True,
        )
    echo(f"{report.model}: {report.verdict}")
    if report.activated:
        echo(
            f"next: set PGKB_EMBEDDING_MODEL={report.model} so queries are embedded with it "
            f"(back: pgkb models activate {report.base})",
            err=True,
        )
