"""``pgkb db``: create or upgrade the kb schema, show its URL and state, start or stop the
embedded server, grant a service's login role access (``pgkb db grant``); the checks and index
care (``doctor``, ``reindex``, ``vacuum``) are in their own modules, hung here by
``loader.cli.main``."""

from __future__ import annotations

import click

from loader.cli.base import App, emit_json, pass_app
from loader.errors import PgkbError
from loader.safety import echo, redact


@click.group()
def db() -> None:
    """The database: create or upgrade the kb schema, show its URL and state, stop the server,
    check it (doctor), rebuild its indexes (reindex), vacuum it, grant roles access."""


@db.command("upgrade")
@click.argument("revision", default="head")
@pass_app
def db_upgrade(app: App, revision: str) -> None:
    """Create or upgrade the kb schema (alembic upgrade REVISION, default head).

    At head it also gives the database the pg_textsearch keyword backend when the server loads
    that extension (CREATE EXTENSION, which needs a superuser, and a bm25 index per collection),
    unless keyword_backend is sql; it says in one line which keyword backend serves and why."""
    from loader.db.connect import database_url
    from loader.db.keyword_backend import enable
    from loader.db.migrations import upgrade

    settings = app.settings()
    url = database_url(settings)
    upgrade(url, revision)
    echo(f"kb schema is at {revision} on {redact(url)}", err=True)
    if revision == "head":
        echo(f"keyword backend: {enable(url, settings)}", err=True)


@db.command("downgrade")
@click.argument("revision")
@click.confirmation_option(prompt="Downgrading can drop tables and data. Continue?")
@pass_app
def db_downgrade(app: App, revision: str) -> None:
    """Downgrade the kb schema to REVISION ('base' removes every kb table)."""
    from loader.db.connect import database_url
    from loader.db.migrations import downgrade

    downgrade(database_url(app.settings()), revision)
    echo(f"kb schema downgraded to {revision}", err=True)


@db.command("url")
@pass_app
def db_url(app: App) -> None:
    """Print the database URL in use (starting the embedded server if needed).

    Use it as: psql "$(pgkb db url)"
    """
    from loader.db.connect import database_url

    echo(database_url(app.settings()))


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
        echo(f"{key:>18}: {value}")


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
    echo(f"embedded PostgreSQL running, data in {settings.pgdata}", err=True)
    echo(url)


@db.command("stop")
@pass_app
def db_stop(app: App) -> None:
    """Stop the embedded server (its data stays in the data directory)."""
    from loader.db.embedded import stop_server

    settings = app.settings()
    if stop_server(settings.pgdata):
        echo(f"stopped the embedded server ({settings.pgdata})", err=True)
    else:
        echo(f"the embedded server ({settings.pgdata}) was not running", err=True)


@db.command("grant")
@click.argument("role")
@click.option("--read", is_flag=True, help="Member of kb_reader: search functions only.")
@click.option(
    "--write",
    is_flag=True,
    help="With --collection: submit and remove documents of those collections (and read them); "
    "without: member of kb_writer, what the loader needs.",
)
@click.option(
    "--collection",
    "collections",
    multiple=True,
    metavar="NAME",
    help="Only this collection (repeatable); none: every collection.",
)
@click.option(
    "--statement-timeout",
    metavar="DURATION",
    help="With --read: the role's statement timeout in this database (e.g. 5s).",
)
@pass_app
def db_grant(
    app: App,
    role: str,
    read: bool,
    write: bool,
    collections: tuple[str, ...],
    statement_timeout: str | None,
) -> None:
    """Let login ROLE search (--read), write documents (--write --collection) or load (--write)
    this knowledge base.

    --read: ROLE joins kb_reader and may read the collections named by --collection (none:
    every collection), enforced in the database by every kb function and by row-level security;
    it gets, in this database, search_path = kb, public (so SELECT * FROM hybrid_search('...')
    works unqualified) and the statement timeout. --write --collection NAME: the same, and ROLE
    may also submit and remove documents of NAME (SELECT kb.submit_document(...),
    kb.remove_document(...); pgkb worker processes them), and of no other collection. --write
    alone: ROLE joins kb_writer (every collection, the tables: a loader). Takes effect at ROLE's
    next login. Exit code 2 when ROLE or a collection does not exist (nothing is granted).
    """
    from loader.db.session import connection
    from loader.ops.roles import embedded_sign_in, grant

    if statement_timeout is not None and not (read or collections):
        raise PgkbError("--statement-timeout goes with --read (a reader's queries)")
    settings = app.settings()
    with connection(settings) as conn:
        done = grant(
            conn,
            role,
            read=read,
            write=write,
            statement_timeout=statement_timeout,
            collections=collections,
        )
        sign_in = None if settings.database_url else embedded_sign_in(conn, role)
    for statement in done:
        echo(statement)
    echo(f"granted to {role}; it takes effect at the role's next login", err=True)
    if sign_in:
        echo(sign_in, err=True)


@db.command("grants")
@click.argument("role", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@pass_app
def db_grants(app: App, role: str | None, as_json: bool) -> None:
    """List which collections each role (or ROLE) may read, and write.

    "every collection" is a grant without --collection. A grant to a role that no longer
    exists, or that is not a member of kb_reader, is marked: it gives nothing."""
    from loader.db.session import connection
    from loader.ops.roles import grants

    with connection(app.settings()) as conn:
        rows = grants(conn, role)
    if as_json:
        emit_json([{**r, "granted_at": str(r["granted_at"])} for r in rows])
        return
    if not rows:
        echo("no collection grants" + (f" for {role}" if role else ""), err=True)
        return
    for r in rows:
        what = r["collection"] if r["collection"] is not None else "(every collection)"
        what += "  (read and write)" if r.get("can_write") else ""
        note = (
            "" if r["role_exists"] and r["reader"]
            else "  [role does not exist]" if not r["role_exists"]
            else "  [not a member of kb_reader: no effect]"
        )  # fmt: skip
        echo(f"{r['role_name']:<24} {what}{note}")


@db.command("revoke")
@click.argument("role")
@click.option(
    "--collection",
    "collections",
    multiple=True,
    metavar="NAME",
    help="Only this collection (repeatable); none: every grant and the role's kb_reader "
    "membership.",
)
@pass_app
def db_revoke(app: App, role: str, collections: tuple[str, ...]) -> None:
    """Take collections from ROLE (--collection), or its reading altogether.

    Takes effect at ROLE's next call. Exit code 2 when ROLE holds no such grant (nothing is
    revoked)."""
    from loader.db.session import connection
    from loader.ops.roles import revoke

    with connection(app.settings()) as conn:
        done = revoke(conn, role, collections)
    for line in done:
        echo(line)
