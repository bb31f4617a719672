"""``pgkb ingest PATH...``: files and folders into the knowledge base, incrementally."""

from __future__ import annotations

import logging
from typing import Any

import click

from loader.cli.base import App, emit_json, setting_option
from loader.cli.progress import ProgressDisplay
from loader.safety import echo, one_line, secho


def parse_meta(values: tuple[str, ...]) -> dict[str, str]:
    meta: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--meta")
        meta[key.strip()] = value
    return meta


def summary_line(data: dict[str, Any]) -> str:
    return (
        f"{data['files_seen']} files: {data['new']} new, {data['changed']} changed, "
        f"{data['unchanged']} unchanged, {data['pruned']} pruned, {len(data['failed'])} failed; "
        f"{data['chunks_written']} chunks written, {data['embeddings_computed']} embeddings "
        f"computed, {data['embeddings_reused']} reused; {data['seconds'].get('total', 0):.1f} s"
        + (
            f" (HNSW index built after the bulk load: {data['seconds'].get('index', 0):.1f} s)"
            if data.get("index_rebuilt")
            else ""
        )
    )


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--category", help="Category stored with every document of this run.")
@click.option(
    "--collection",
    default="default",
    show_default=True,
    metavar="NAME",
    help="Collection the documents go into (created when new); the same file may be in several.",
)
@click.option(
    "--meta",
    "meta",
    multiple=True,
    metavar="KEY=VALUE",
    help="Metadata stored with every document (repeatable); wins over what the file tells.",
)
@click.option(
    "--prune", is_flag=True, help="Remove documents under the given folders whose files are gone."
)
@click.option(
    "--force",
    is_flag=True,
    help="Let --prune delete more than prune_max_fraction of the documents under the folders.",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="When another ingest runs on the database: wait for it, or exit at once (code 2).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON.")
@setting_option("chunk_tokens", type=int, help="Chunk size in the embedding model's tokens.")
@setting_option("chunk_overlap", type=int, help="Overlap between chunks, in tokens.")
@setting_option("embedding_batch_size", type=int, help="Texts per embedding call.")
@setting_option("max_file_mb", type=float, help="Larger files are reported as failed.")
@setting_option(
    "prune_max_fraction", type=float, help="Largest share of documents --prune may delete."
)
@setting_option(
    "source_root",
    "--root",
    type=click.Path(file_okay=False),
    help="Store source_uri relative to this folder (same documents wherever it is mounted).",
)
@click.pass_obj
def ingest(
    app: App,
    paths: tuple[str, ...],
    category: str | None,
    collection: str,
    meta: tuple[str, ...],
    prune: bool,
    force: bool,
    wait: bool,
    as_json: bool,
    chunk_tokens: int | None,
    chunk_overlap: int | None,
    embedding_batch_size: int | None,
    max_file_mb: float | None,
    prune_max_fraction: float | None,
    source_root: str | None,
) -> None:
    """Ingest Markdown, text, HTML and PDF files and folders (recursively).

    Unchanged files are skipped without parsing; a changed file replaces its chunks in one
    transaction; unchanged chunks keep their embeddings. Progress (files read, chunks embedded
    out of the total, rate, time left) goes to stderr: redrawn in place at a terminal, one line
    every 10 s when the output goes to a file or a log. Exit codes: 0 all went well, 1 some
    files failed (the rest were ingested), 2 configuration, connection or model error.
    """
    from loader.ingest.pipeline import ingest_paths

    settings = app.settings(
        chunk_tokens=chunk_tokens,
        chunk_overlap=chunk_overlap,
        embedding_batch_size=embedding_batch_size,
        max_file_mb=max_file_mb,
        prune_max_fraction=prune_max_fraction,
        source_root=source_root,
    )
    # failures and the summary are printed below; per-file lines come with -v
    quiet = logging.getLogger().getEffectiveLevel() >= logging.WARNING
    logging.getLogger("loader.ingest").setLevel(logging.CRITICAL if quiet else logging.NOTSET)
    # on stderr: a line redrawn at a terminal, else one line every 10 s (a log, cron, --json)
    with ProgressDisplay() as progress:
        report = ingest_paths(
            settings,
            paths,
            category=category,
            collection=collection,
            meta=parse_meta(meta),
            prune=prune,
            force=force,
            wait=wait,
            progress=progress,
        )
    data = report.to_dict()
    if as_json:
        emit_json(data)
    else:
        for failure in report.failed:
            echo(f"failed: {one_line(failure['source'])}: {failure['reason']}", err=True)
        echo(summary_line(data), err=True)
    if report.aborted and not as_json:  # with --json, the report says it (aborted, hint)
        secho(f"Error: {report.aborted}", fg="red", err=True)
        if report.hint:
            echo(f"  hint: {report.hint}", err=True)
    if report.exit_code:
        click.get_current_context().exit(report.exit_code)
