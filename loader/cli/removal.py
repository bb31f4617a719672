"""``pgkb docs stale`` and ``pgkb docs remove``: old documents, and taking documents out."""

from __future__ import annotations

import sys

import click

from loader.cli.base import App, emit_json
from loader.cli.filters import collection_option, joined
from loader.safety import echo, one_line


@click.command()
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="INTERVAL",
    help="90d, 12h, 2w, or PostgreSQL interval text ('3 months').",
)
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def stale(app: App, older_than: str, collections: tuple[str, ...], as_json: bool) -> None:
    """List documents not updated for longer than INTERVAL, oldest first (kb.stale_documents).

    Exit code 0 also when none is stale; 2 when INTERVAL is not an interval.
    """
    from loader.db.session import connection
    from loader.ops.removal import parse_interval
    from loader.ops.removal import stale as find_stale

    settings = app.settings(collections=joined(collections))
    with connection(settings, read=True) as conn:
        interval = parse_interval(conn, older_than)
        rows = find_stale(conn, interval, settings.collection_names())
    if as_json:
        emit_json(rows)
        return
    if not rows:
        echo(f"no document is older than {interval}", err=True)
        return
    for r in rows:
        echo(
            f"{str(r['updated_at'])[:19]}  {r['age']:>24}  {r['chunks']:>5} chunks  "
            f"{one_line(r['source_uri'])}  {r['document_id']}"
        )
    echo(f"{len(rows)} document(s) not updated for more than {interval}", err=True)


@click.command()
@click.argument("targets", nargs=-1, metavar="SOURCE|ID...")
@click.option(
    "--source-like",
    "source_like",
    metavar="PATTERN",
    help="Also every document whose source_uri matches this LIKE pattern "
    "('%' any text); a dry run unless --yes.",
)
@click.option("--yes", is_flag=True, help="Remove what --source-like matches without asking.")
@click.option("--dry-run", is_flag=True, help="Only show what would be removed.")
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@click.pass_obj
def remove(
    app: App,
    targets: tuple[str, ...],
    collections: tuple[str, ...],
    source_like: str | None,
    yes: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove documents (by source, file path or document id) with their chunks, embeddings
    and relations, and report what went.

    With --source-like the first run is a dry run that shows the count; confirm at the prompt,
    or pass --yes. Exit codes: 0 removed, 1 something named matched no document (nothing is
    removed), 2 bad input or database error.
    """
    from loader.db.session import connection
    from loader.ops.removal import remove as run_remove

    settings = app.settings(collections=joined(collections))
    root = settings.source_root
    scope = settings.collection_names()
    with connection(settings) as conn:
        if source_like is not None and not yes and not dry_run:
            preview = run_remove(
                conn, targets, source_like=source_like, dry_run=True, source_root=root,
                collections=scope,
            )  # fmt: skip
            totals = preview.totals()
            for r in preview.removed:
                echo(f"would remove: {one_line(r['source_uri'])} ({r['chunks']} chunks)", err=True)
            question = f"Remove {totals['documents']} document(s) with {totals['chunks']} chunk(s)?"
            if not sys.stdin.isatty() or not click.confirm(question):
                echo("dry run: nothing removed (confirm at the prompt, or pass --yes)", err=True)
                if as_json:
                    emit_json(preview.to_dict())
                return
        result = run_remove(
            conn, targets, source_like=source_like, dry_run=dry_run, source_root=root,
            collections=scope,
        )  # fmt: skip
    data = result.to_dict()
    if as_json:
        emit_json(data)
        return
    verb = "would remove" if dry_run else "removed"
    for r in result.removed:
        echo(
            f"{verb}: {r['source_uri']} ({r['chunks']} chunks, {r['embeddings']} "
            f"embeddings, {r['relations']} relations)"
        )
    t = result.totals()
    echo(
        f"{verb} {t['documents']} document(s), {t['chunks']} chunk(s), {t['embeddings']} "
        f"embedding(s), {t['relations']} relation(s)",
        err=True,
    )
