"""``pgkb db``: create or upgrade the kb schema, show its URL and state, start or stop the
embedded server."""

from __future__ import annotations

import click

from loader.cli.base import App, emit_json, pass_app
from loader.errors import PgkbError


@click.group()
def db() -> None:
    """The database: create or upgrade the kb schema, show its URL and state, stop the server."""


@db.command("upgrade")
@click.argument("revision", default="head")
@pass_app
def db_upgrade(app: App, revision: str) -> None:
    """Create or upgrade the kb schema (alembic upgrade REVISION, default head)."""
    from loader.db.connect import database_url, redact
    from loader.db.migrations import upgrade

    url = database_url(app.settings())
    upgrade(url, revision)
    click.echo(f"kb schema is at {revision} on {redact(url)}", err=True)


@db.command("downgrade")
@click.argument("revision")
@click.confirmation_option(prompt="Downgrading can drop tables and data. Continue?")
@pass_app
def db_downgrade(app: App, revision: str) -> None:
    """Downgrade the kb schema to REVISION ('base' removes every kb table)."""
    from loader.db.connect import database_url
    from loader.db.migrations import downgrade

    downgrade(database_url(app.settings()), revision)
    click.echo(f"kb schema downgraded to {revision}", err=True)


@db.command("url")
@pass_app
def db_url(app: App) -> None:
    """Print the database URL in use (starting the embedded server if needed).

    Use it as: psql "$(pgkb db url)"
    """
    from loader.db.connect import database_url

    click.echo(database_url(app.settings()))


@db.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def db_status(app: App, as_json: bool) -> None:
    """Show the database, the schema revision and what the knowledge base holds."""
    from loader.db.status import schema_status

    status = schema_status(app.settings())
    if as_json:
        emit_json(status)
        return
    for key, value in status.items():
        click.echo(f"{key:>18}: {value}")


@db.command("start")
@pass_app
def db_start(app: App) -> None:
    """Start (or reuse) the embedded server and print its URL."""
    settings = app.settings()
    if settings.database_url:
        raise PgkbError(
            "PGKB_DATABASE_URL is set, so pgkb does not use its embedded server",
            hint="unset PGKB_DATABASE_URL to use the embedded server",
        )
    from loader.db.embedded import ensure_server

    url = ensure_server(settings.pgdata)
    click.echo(f"embedded PostgreSQL running, data in {settings.pgdata}", err=True)
    click.echo(url)


@db.command("stop")
@pass_app
def db_stop(app: App) -> None:
    """Stop the embedded server (its data stays in the data directory)."""
    from loader.db.embedded import stop_server

    settings = app.settings()
    if stop_server(settings.pgdata):
        click.echo(f"stopped the embedded server ({settings.pgdata})", err=True)
    else:
        click.echo(f"the embedded server ({settings.pgdata}) was not running", err=True)
