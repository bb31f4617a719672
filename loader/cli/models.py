"""``pgkb models ...``: add an embedding model, fill it (``reembed``), switch to it without
downtime."""

from __future__ import annotations

import sys
from typing import Any

import click

from loader.cli.base import App, emit_json
from loader.safety import echo


@click.group()
def models() -> None:
    """Embedding models: list, add, reembed (fill a new model), activate, drop."""


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
