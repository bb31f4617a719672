"""``pgkb collections``: the knowledge bases of the database, with counts; create and drop."""

from __future__ import annotations

import sys

import click

from loader.cli.base import App, emit_json, pass_app
from loader.errors import PgkbError
from loader.safety import echo, one_line


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def collections(ctx: click.Context, as_json: bool) -> None:
    """The collections (knowledge bases) of the database you may read, with their document and
    chunk counts. Documents go into one with pgkb ingest DIR --collection NAME; every read
    command takes --collection."""
    if ctx.invoked_subcommand is not None:
        return
    from loader.db.session import connection
    from loader.ops.collections import list_collections

    app: App = ctx.obj
    with connection(app.settings(), read=True) as conn:
        rows = list_collections(conn)
    if as_json:
        emit_json([{**r, "created_at": str(r["created_at"])} for r in rows])
        return
    if not rows:
        echo("no collection you may read", err=True)
        return
    for r in rows:
        description = f"  {one_line(r['description'])}" if r["description"] else ""
        echo(f"{r['name']:<24} {r['documents']:>7} docs {r['chunks']:>8} chunks{description}")


@collections.command("create")
@click.argument("name")
@click.option("--description", help="What the collection holds (shown by pgkb collections).")
@pass_app
def create_command(app: App, name: str, description: str | None) -> None:
    """Create collection NAME (an ingest into a new collection also creates it); with
    --description on an existing one, describe it anew."""
    from loader.db.session import connection
    from loader.ops.collections import create

    with connection(app.settings()) as conn:
        created = create(conn, name, description)
    echo(f"collection {name} " + ("created" if created else "exists"), err=True)


@collections.command("drop")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Drop without asking.")
@pass_app
def drop_command(app: App, name: str, yes: bool) -> None:
    """Delete collection NAME: its documents with their chunks, embeddings and relations, and
    the grants of it. The default collection is emptied, not deleted. Asks first (or --yes);
    without a terminal and without --yes nothing is deleted."""
    from loader.db.session import connection
    from loader.ops.collections import drop, list_collections

    with connection(app.settings()) as conn:
        found = {c["name"]: c for c in list_collections(conn)}
        if name not in found:
            raise PgkbError(f"no collection {name!r}", hint="pgkb collections lists them")
        c = found[name]
        question = (
            f"Delete collection {name} with its {c['documents']} document(s) and "
            f"{c['chunks']} chunk(s)?"
        )
        if not yes and (not sys.stdin.isatty() or not click.confirm(question)):
            echo("nothing deleted (confirm at the prompt, or pass --yes)", err=True)
            click.get_current_context().exit(1)
        removed = drop(conn, name)
    echo(f"dropped collection {name}: {removed} document(s) deleted", err=True)
