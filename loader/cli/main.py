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

from loader.cli.base import VERBOSE_HELP, App, accept_verbose, setting_option
from loader.errors import PgkbError

__all__ = ["cli", "main"]


class PgkbGroup(click.Group):
    """A group that turns :class:`PgkbError` (and a few library errors) into clean messages,
    and gives every command it holds the ``-v/--verbose`` option."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        accept_verbose(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgkbError as exc:
            from loader.safety import redact

            click.secho(f"Error: {redact(exc.message)}", fg="red", err=True)
            if exc.hint:
                click.echo(f"  hint: {redact(exc.hint)}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:
            import psycopg

            if not isinstance(exc, psycopg.OperationalError):
                raise
            from loader.safety import redact

            click.secho(
                f"Error: the database connection failed: {redact(str(exc))}", fg="red", err=True
            )
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
@click.option("-v", "--verbose", count=True, help=VERBOSE_HELP)
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


# --- the commands, one module each under loader/cli/, registered here one line each -------------
# (each module imports only click at the top, so `pgkb --help` stays instant)
from loader.cli.ask import ask  # noqa: E402
from loader.cli.db import db  # noqa: E402
from loader.cli.docs import docs  # noqa: E402
from loader.cli.doctor import doctor  # noqa: E402
from loader.cli.eval import eval_command  # noqa: E402
from loader.cli.graph import graph  # noqa: E402
from loader.cli.ingest import ingest  # noqa: E402
from loader.cli.maintenance import reindex, vacuum  # noqa: E402
from loader.cli.models import models, reembed  # noqa: E402
from loader.cli.quickstart import quickstart  # noqa: E402
from loader.cli.removal import remove, stale  # noqa: E402
from loader.cli.search import search  # noqa: E402
from loader.cli.stats import stats  # noqa: E402

cli.add_command(ask)
cli.add_command(db)
cli.add_command(docs)
cli.add_command(doctor)
cli.add_command(eval_command)
cli.add_command(graph)
cli.add_command(ingest)
cli.add_command(models)
cli.add_command(quickstart)
cli.add_command(reembed)
cli.add_command(reindex)
cli.add_command(remove)
cli.add_command(search)
cli.add_command(stale)
cli.add_command(stats)
cli.add_command(vacuum)


def main() -> None:  # pragma: no cover - console script entry point
    cli(prog_name="pgkb")


if __name__ == "__main__":  # pragma: no cover
    main()
