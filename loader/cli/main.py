"""The ``pgkb`` command line: a thin layer over the settings, the database and the SQL functions.

Heavy imports (the embedding model, the database driver's extras) happen inside the commands that
need them, so ``pgkb --help`` is instant. Every error pgkb raises on purpose is a
:class:`~loader.errors.PgkbError` and is printed as one message with a hint, never a traceback;
exit codes: 0 success, 1 some inputs failed, 2 configuration or connection error. With
``--json``, stdout holds exactly one JSON object, the result or the error (``error``, ``hint``,
``exit_code``: never also as text), so a scheduler never reads empty output; and whatever pgkb
says on stderr meanwhile (notes, log records) is one JSON object per line (``level``,
``message``, and ``logger`` for log records), so ``>> log 2>&1`` collects JSON values only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from loader import notices
from loader.cli.base import VERBOSE_HELP, App, accept_verbose, emit_json, setting_option
from loader.errors import ConfigError, DatabaseError, PgkbError, database_error
from loader.safety import echo, json_line, printable, redact, secho, stderr_as_json

__all__ = ["cli", "main"]


JSON_FLAG = "--json"


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON output (``--json`` before any ``--``)."""
    args = list(args)
    return JSON_FLAG in (args[: args.index("--")] if "--" in args else args)


def fail(ctx: click.Context, message: str, hint: str, exit_code: int) -> NoReturn:
    """Report an error and exit: with ``--json``, one JSON object (``error``, ``hint``,
    ``exit_code``) on stdout, for schedulers, and nothing more; else the message and hint on
    stderr."""
    message, hint = redact(message), redact(hint)
    if ctx.meta.get(JSON_FLAG):
        emit_json({"error": message, "hint": hint, "exit_code": exit_code})
        ctx.exit(exit_code)
    secho(f"Error: {message}", fg="red", err=True)
    if hint:
        echo(f"  hint: {hint}", err=True)
    ctx.exit(exit_code)


class JsonLogFormatter(logging.Formatter):
    """A log record as one line of JSON (a ``--json`` run): level, logger, message."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return json_line(
            {
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": printable(message),
            }
        )


DEFAULT_HINTS: dict[type[PgkbError], str] = {
    ConfigError: "check the setting named above (option, PGKB_* variable or pgkb.toml)",
    DatabaseError: "check that the server is running; `pgkb db url` shows which",
}


class PgkbGroup(click.Group):
    """A group that turns :class:`PgkbError` (and a few library errors) into clean messages
    (one JSON object on stdout with ``--json``), and gives every command it holds the
    ``-v/--verbose`` option."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        accept_verbose(cmd)
        super().add_command(cmd, name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[JSON_FLAG] = wants_json(args)
        stderr_as_json(ctx.meta[JSON_FLAG])
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            if not ctx.meta[JSON_FLAG]:
                raise
            fail(ctx, exc.format_message(), _usage_hint(exc), exc.exit_code)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgkbError as exc:
            fail_with(ctx, exc)
        except (click.exceptions.Exit, click.Abort):
            raise  # a command's own exit code (its output already printed), or Ctrl-C in a prompt
        except click.ClickException as exc:  # a subcommand's bad option or argument
            if not ctx.meta.get(JSON_FLAG):
                raise
            fail(ctx, exc.format_message(), _usage_hint(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail(ctx, "interrupted", "run the command again; committed work is kept", 130)
        except Exception as exc:
            import psycopg

            refused = database_error(exc)  # one of pgkb's SQL functions refused, by its code
            if refused is not None:
                fail_with(ctx, refused)
            if isinstance(exc, psycopg.errors.InsufficientPrivilege):
                from loader.db.connect import privilege_error

                app = ctx.find_object(App)
                error = privilege_error(exc, app.settings().database_url if app else None)
                fail(ctx, error.message, error.hint or "", error.exit_code)
            if not isinstance(exc, psycopg.OperationalError):
                if ctx.meta.get(JSON_FLAG):  # a bug: still one JSON object, then the traceback
                    emit_json(
                        {
                            "error": f"unexpected {type(exc).__name__}: {exc}",
                            "hint": "this is a bug in pgkb; the traceback follows on stderr",
                            "exit_code": 1,
                        }
                    )
                raise
            fail(
                ctx,
                f"the database connection failed: {exc}",
                "check that the server is running; `pgkb db url` shows which",
                2,
            )


def fail_with(ctx: click.Context, exc: PgkbError) -> NoReturn:
    """:func:`fail` with ``exc``'s message, its hint (or its kind's default) and exit code."""
    hint = exc.hint or next(
        (h for kind, h in DEFAULT_HINTS.items() if isinstance(exc, kind)),
        "`pgkb db doctor` checks the settings, the database and the models",
    )
    fail(ctx, exc.message, hint, exc.exit_code)


def _usage_hint(exc: click.ClickException) -> str:
    context = getattr(exc, "ctx", None)
    command = context.command_path if context is not None else "pgkb"
    return f"`{command} --help` lists the options and arguments"


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
@setting_option(
    "read_database_url",
    help="PostgreSQL URL for the read-only commands (a hot standby, say); unset: database_url.",
)
@setting_option("data_dir", help="Where the embedded server keeps its data.")
@click.option("-v", "--verbose", count=True, help=VERBOSE_HELP)
@click.version_option(package_name="pgkb", prog_name="pgkb")
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: str | None,
    database_url: str | None,
    read_database_url: str | None,
    data_dir: str | None,
    verbose: int,
) -> None:
    """pgkb: a knowledge base inside PostgreSQL: documents in, cited answers out."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ctx.meta.get(JSON_FLAG):
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLogFormatter())
    # what is prepared once (the model fetched, its graph built, the server created): stderr
    notices.set_handler(lambda message: echo(f"pgkb: {message}", err=True))
    ctx.obj = App(
        config_file,
        {
            "database_url": database_url,
            "read_database_url": read_database_url,
            "data_dir": data_dir,
        },
    )


# --- the command tree: the commands, one module each under loader/cli/, hung under their nouns --
# (each module imports only click at the top, so `pgkb --help` stays instant)
from loader.cli.ask import ask  # noqa: E402
from loader.cli.collections import collections  # noqa: E402
from loader.cli.db import db  # noqa: E402
from loader.cli.docs import docs  # noqa: E402
from loader.cli.doctor import doctor  # noqa: E402
from loader.cli.eval import eval_command  # noqa: E402
from loader.cli.graph import graph  # noqa: E402
from loader.cli.ingest import ingest  # noqa: E402
from loader.cli.maintenance import reindex, vacuum  # noqa: E402
from loader.cli.models import models, models_tune, reembed  # noqa: E402
from loader.cli.moved import moved  # noqa: E402
from loader.cli.quickstart import quickstart  # noqa: E402
from loader.cli.removal import remove, stale  # noqa: E402
from loader.cli.search import search  # noqa: E402
from loader.cli.serve import mcp, serve  # noqa: E402
from loader.cli.stats import stats  # noqa: E402
from loader.cli.worker import worker  # noqa: E402

db.add_command(doctor)  # pgkb db doctor
db.add_command(reindex)  # pgkb db reindex
db.add_command(vacuum)  # pgkb db vacuum
docs.add_command(graph)  # pgkb docs graph
docs.add_command(remove)  # pgkb docs remove
docs.add_command(stale)  # pgkb docs stale
models.add_command(reembed)  # pgkb models reembed
models.add_command(models_tune)  # pgkb models tune

cli.add_command(ask)
cli.add_command(collections)
cli.add_command(db)
cli.add_command(docs)
cli.add_command(eval_command)
cli.add_command(ingest)
cli.add_command(mcp)
cli.add_command(models)
cli.add_command(quickstart)
cli.add_command(search)
cli.add_command(serve)
cli.add_command(stats)
cli.add_command(worker)

# the old top-level names keep working, hidden: the same command, and one line on stderr
# naming the new one (stdout stays clean for --json), so no scheduled job breaks
cli.add_command(moved(db, doctor))
cli.add_command(moved(db, reindex))
cli.add_command(moved(db, vacuum))
cli.add_command(moved(docs, graph))
cli.add_command(moved(docs, remove))
cli.add_command(moved(docs, stale))
cli.add_command(moved(models, reembed))


def main() -> None:  # pragma: no cover - console script entry point
    cli(prog_name="pgkb")


if __name__ == "__main__":  # pragma: no cover
    main()
