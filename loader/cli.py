"""The ``pgkb`` command line: a thin layer over the settings, the database and the SQL functions.

Heavy imports (the embedding model, the database driver's extras) happen inside the commands that
need them, so ``pgkb --help`` is instant. Every error pgkb raises on purpose is a
:class:`~loader.errors.PgkbError` and is printed as one message with a hint, never a traceback;
exit codes: 0 success, 1 some inputs failed, 2 configuration or connection error.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from loader.commands.base import App, emit_json, pass_app, setting_option
from loader.errors import PgkbError

__all__ = ["App", "cli", "emit_json", "main", "pass_app", "setting_option"]


class PgkbGroup(click.Group):
    """A group that turns :class:`PgkbError` (and a few library errors) into clean messages."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgkbError as exc:
            click.secho(f"Error: {exc.message}", fg="red", err=True)
            if exc.hint:
                click.echo(f"  hint: {exc.hint}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:
            import psycopg

            if not isinstance(exc, psycopg.OperationalError):
                raise
            click.secho(f"Error: the database connection failed: {exc}", fg="red", err=True)
            click.echo(
                "  hint: check that the server is running; `pgkb db url` shows which", err=True
            )
            ctx.exit(2)


@click.group(cls=PgkbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    envvar="PGKB_CONFIG",
    show_envvar=True,
    help="TOML config file (default: ./pgkb.toml, then ~/.config/pgkb/pgkb.toml).",
)
@setting_option(
    "database_url",
    help="PostgreSQL URL; unset: pgkb's embedded server in the data directory.",
)
@setting_option("data_dir", help="Where the embedded server keeps its data.")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.version_option(package_name="pgkb", prog_name="pgkb")
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: str | None,
    database_url: str | None,
    data_dir: str | None,
    verbose: int,
) -> None:
    """pgkb: a knowledge base inside PostgreSQL: documents in, cited answers out."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = App(config_file, {"database_url": database_url, "data_dir": data_dir})


# --- pgkb db ---------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """The database: create or upgrade the kb schema, show its URL and state, stop the server."""


@db.command("upgrade")
@click.argument("revision", default="head")
@pass_app
def db_upgrade(app: App, revision: str) -> None:
    """Create or upgrade the kb schema (alembic upgrade REVISION, default head)."""
    from loader.db import database_url, redact
    from loader.migrate import upgrade

    url = database_url(app.settings())
    upgrade(url, revision)
    click.echo(f"kb schema is at {revision} on {redact(url)}", err=True)


@db.command("downgrade")
@click.argument("revision")
@click.confirmation_option(prompt="Downgrading can drop tables and data. Continue?")
@pass_app
def db_downgrade(app: App, revision: str) -> None:
    """Downgrade the kb schema to REVISION ('base' removes every kb table)."""
    from loader.db import database_url
    from loader.migrate import downgrade

    downgrade(database_url(app.settings()), revision)
    click.echo(f"kb schema downgraded to {revision}", err=True)


@db.command("url")
@pass_app
def db_url(app: App) -> None:
    """Print the database URL in use (starting the embedded server if needed).

    Use it as: psql "$(pgkb db url)"
    """
    from loader.db import database_url

    click.echo(database_url(app.settings()))


@db.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def db_status(app: App, as_json: bool) -> None:
    """Show the database, the schema revision and what the knowledge base holds."""
    from loader.status import schema_status

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
    from loader.embedded import ensure_server

    url = ensure_server(settings.pgdata)
    click.echo(f"embedded PostgreSQL running, data in {settings.pgdata}", err=True)
    click.echo(url)


@db.command("stop")
@pass_app
def db_stop(app: App) -> None:
    """Stop the embedded server (its data stays in the data directory)."""
    from loader.embedded import stop_server

    settings = app.settings()
    if stop_server(settings.pgdata):
        click.echo(f"stopped the embedded server ({settings.pgdata})", err=True)
    else:
        click.echo(f"the embedded server ({settings.pgdata}) was not running", err=True)


# --- pgkb quickstart ---------------------------------------------------------------------------


QUICKSTART_QUESTIONS = (
    "How can I build an index without locking out writes to the table?",
    "How do I configure Oracle Data Guard for a standby database?",
)


@cli.command()
@click.pass_context
def quickstart(ctx: click.Context) -> None:
    """Set up the default database, ingest the sample corpus, and answer two questions.

    Creates or upgrades the kb schema on the configured database (the embedded server unless
    PGKB_DATABASE_URL is set), ingests the bundled sample corpus (65 pages of the PostgreSQL 15
    manual; unchanged pages are skipped on later runs), prints the status, then asks one
    question the corpus answers (a cited answer) and one it cannot ("I don't know").
    """
    app = ctx.find_object(App)
    assert app is not None
    from loader.db import database_url, redact
    from loader.migrate import upgrade
    from loader.status import schema_status

    settings = app.settings()
    url = database_url(settings)
    if not settings.database_url:
        click.echo(f"using the embedded PostgreSQL server, data in {settings.pgdata}", err=True)
    upgrade(url)
    click.echo(f"kb schema is up to date on {redact(url)}", err=True)

    from loader.commands.ingest import summary_line
    from loader.ingest import ingest_paths
    from loader.resources import sample_corpus_dir

    corpus = sample_corpus_dir()
    click.echo(f"ingesting the sample corpus {corpus} (first run: minutes on a CPU)", err=True)
    report = ingest_paths(settings, [corpus], prune=True)
    click.echo(summary_line(report.to_dict()), err=True)
    for failure in report.failed:
        click.echo(f"failed: {failure['source']}: {failure['reason']}", err=True)
    if report.aborted:
        raise PgkbError(f"ingesting the sample corpus stopped: {report.aborted}")
    if report.failed:
        raise PgkbError(
            f"{len(report.failed)} page(s) of the sample corpus could not be ingested "
            "(listed above), so the knowledge base is incomplete",
            hint="the bundled pages are known to ingest: check the installation "
            "(pip install -e . installs the extraction libraries) and re-run pgkb quickstart",
        )
    for key, value in schema_status(settings).items():
        click.echo(f"{key:>18}: {value}")
    for question in QUICKSTART_QUESTIONS:
        click.echo()
        click.secho(f"$ pgkb ask {question!r}", bold=True)
        ctx.invoke(ask, question=(question,))


# --- commands defined in their own modules (loader/commands/), one line each ----------------
# (each module imports only click at the top, so `pgkb --help` stays instant)
from loader.commands.ask import ask  # noqa: E402

cli.add_command(ask)
from loader.commands.eval import eval_command  # noqa: E402

cli.add_command(eval_command)
from loader.commands.ingest import ingest  # noqa: E402

cli.add_command(ingest)
from loader.commands.search import search  # noqa: E402

cli.add_command(search)
from loader.commands.stats import stats  # noqa: E402

cli.add_command(stats)
from loader.commands.removal import remove, stale  # noqa: E402

cli.add_command(stale)
cli.add_command(remove)
from loader.commands.models import models, reembed  # noqa: E402

cli.add_command(models)
cli.add_command(reembed)
from loader.commands.doctor import doctor  # noqa: E402

cli.add_command(doctor)
from loader.commands.maintenance import reindex, vacuum  # noqa: E402

cli.add_command(reindex)
cli.add_command(vacuum)
from loader.commands.grant import grant  # noqa: E402

db.add_command(grant)


def main() -> None:  # pragma: no cover - console script entry point
    cli(prog_name="pgkb")


if __name__ == "__main__":  # pragma: no cover
    main()
