"""``pgkb ingest PATH...``: files and folders into the knowledge base, incrementally."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from loader.cli.base import App, emit_json, setting_option
from loader.cli.progress import ProgressDisplay
from loader.errors import ConfigError
from loader.safety import echo, json_text, one_line, secho


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
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
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
@click.option(
    "--watch",
    is_flag=True,
    help="After the run, keep following the folders: new and changed files are ingested, "
    "deleted ones removed (with --prune's safety), until SIGTERM or Ctrl-C. With --json, one "
    "JSON line per batch.",
)
@click.option(
    "--sitemap",
    "sitemaps",
    multiple=True,
    metavar="URL",
    help="Ingest the pages a sitemap (or sitemap index) lists (repeatable).",
)
@click.option(
    "--crawl-depth",
    type=click.IntRange(0, 10),
    default=0,
    show_default=True,
    help="Follow links on the same site this many hops from each URL given.",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Another origin (scheme://host[:port]) redirects, crawled links and sitemap entries "
    "may lead to (repeatable; also web_allowed_origins). Without it a crawl stays on the "
    "origins of the URLs and sitemaps given.",
)
@setting_option(
    "web_max_pages", "--max-pages", type=click.IntRange(1), help="Pages fetched at most per run."
)
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
    watch: bool,
    sitemaps: tuple[str, ...],
    crawl_depth: int,
    allow_origins: tuple[str, ...],
    web_max_pages: int | None,
    chunk_tokens: int | None,
    chunk_overlap: int | None,
    embedding_batch_size: int | None,
    max_file_mb: float | None,
    prune_max_fraction: float | None,
    source_root: str | None,
) -> None:
    """Ingest Markdown, text, HTML and PDF files and folders (recursively), and web pages
    (https://... URLs, --sitemap, a same-site crawl with --crawl-depth).

    Unchanged files are skipped without parsing; a changed file replaces its chunks in one
    transaction; unchanged chunks keep their embeddings. Web pages: robots.txt is respected,
    unchanged pages answer 304 to their stored ETag / Last-Modified, the canonical URL is the
    source_uri. --watch keeps following the folders afterwards. Progress (files read, chunks
    embedded out of the total, rate, time left) goes to stderr: redrawn in place at a terminal,
    one line every 10 s when the output goes to a file or a log. Exit codes: 0 all went well,
    1 some files failed (the rest were ingested), 2 configuration, connection or model error.
    """
    from loader.ingest.pipeline import ingest_paths
    from loader.ingest.report import IngestReport
    from loader.ingest.web import Crawl, check_url, ingest_web, is_url
    from loader.settings_checks import origin_of

    settings = app.settings(
        chunk_tokens=chunk_tokens,
        chunk_overlap=chunk_overlap,
        embedding_batch_size=embedding_batch_size,
        max_file_mb=max_file_mb,
        prune_max_fraction=prune_max_fraction,
        source_root=source_root,
        web_max_pages=web_max_pages,
    )
    urls = [check_url(p) for p in paths if is_url(p)]
    files = [p for p in paths if not is_url(p)]
    site_maps = [check_url(u, where="--sitemap") for u in sitemaps]
    origins = [origin_of(o, where="--allow-origin") for o in allow_origins]
    if not paths and not site_maps:
        raise click.UsageError(
            "Missing argument 'PATHS...': nothing to ingest; give files, folders or URLs "
            "(pgkb ingest ~/docs, pgkb ingest https://example.org/handbook/) or --sitemap URL"
        )
    if watch and (urls or site_maps or not files):
        raise ConfigError(
            "--watch follows files and folders, not web pages",
            hint="run pgkb ingest URL on a schedule (cron, a systemd timer) instead",
        )
    # failures and the summary are printed below; per-file lines come with -v
    quiet = logging.getLogger().getEffectiveLevel() >= logging.WARNING
    logging.getLogger("loader.ingest").setLevel(logging.CRITICAL if quiet else logging.NOTSET)
    if watch:
        _watch(settings, files, category, collection, parse_meta(meta), prune, force, as_json)
        return
    report = IngestReport()
    # on stderr: a line redrawn at a terminal, else one line every 10 s (a log, cron, --json)
    with ProgressDisplay() as progress:
        if files:
            report = ingest_paths(
                settings,
                files,
                category=category,
                collection=collection,
                meta=parse_meta(meta),
                prune=prune,
                force=force,
                wait=wait,
                progress=progress,
            )
        if (urls or site_maps) and not report.aborted:
            web = ingest_web(
                settings,
                Crawl(urls, site_maps, crawl_depth, settings.web_max_pages, origins),
                category=category,
                collection=collection,
                meta=parse_meta(meta),
                wait=wait,
                progress=progress,
            )
            web.files_seen += report.files_seen
            web.merge(report)
            report = web
    _print_report(report, as_json)
    if report.exit_code:
        click.get_current_context().exit(report.exit_code)


def _print_report(report: Any, as_json: bool) -> None:
    data = report.to_dict()
    if as_json:
        emit_json(data)
    else:
        for failure in report.failed:
            echo(f"failed: {one_line(failure['source'])}: {failure['reason']}", err=True)
        for note in report.notes:
            echo(f"note: {note}", err=True)
        echo(summary_line(data), err=True)
    if report.aborted and not as_json:  # with --json, the report says it (aborted, hint)
        secho(f"Error: {report.aborted}", fg="red", err=True)
        if report.hint:
            echo(f"  hint: {report.hint}", err=True)


def _watch(
    settings: Any,
    files: list[str],
    category: str | None,
    collection: str,
    meta: dict[str, str],
    prune: bool,
    force: bool,
    as_json: bool,
) -> None:
    """The first run, then one summary per batch of changes until SIGTERM or Ctrl-C."""
    from loader.ingest.watch import Watcher

    def report(data: dict[str, Any]) -> None:
        if data.get("event") == "error" and "folder" in data:
            # a watched folder went: said on stderr with --json too (a log reads it there)
            secho(f"Error: {data['error']}", fg="red", err=True)
        if as_json:  # JSON lines: one object per line, flushed for whoever reads the pipe
            click.echo(json_text(data, indent=None))
            sys.stdout.flush()
            return
        for failure in data.get("failed", []):
            echo(f"failed: {one_line(failure['source'])}: {failure['reason']}", err=True)
        for note in data.get("notes", []):
            echo(f"note: {note}", err=True)
        if data.get("event") == "error":
            if "folder" not in data:
                secho(f"Error: {data['error']} (kept; tried again on the next change)",
                      fg="red", err=True)  # fmt: skip
            return
        removed = data.get("removed") or []
        for uri in removed:
            echo(f"removed: {one_line(uri)}", err=True)
        label = {"initial": "first run", "resumed": f"{data.get('folder')} is back"}
        echo(f"{label.get(data.get('event', ''), 'changes')}: {summary_line(data)}", err=True)

    watcher = Watcher(
        settings, files, category=category, meta=meta, collection=collection, prune=prune,
        force=force, report=report,
    )  # fmt: skip
    watcher.stop_on_signals()
    watcher.start()  # before the first run: a change made while it works is not missed
    first = watcher.first_run()
    if first.aborted:
        secho(f"Error: {first.aborted}", fg="red", err=True)
        click.get_current_context().exit(2)
    if not as_json:
        echo("watching for changes (Ctrl-C or SIGTERM stops)", err=True)
    watcher.run()
    if not as_json:
        echo("stopped", err=True)
