"""``pgkb db grant ROLE --read|--write``: access for a service's login role."""

from __future__ import annotations

import click

from loader.commands.base import App


@click.command("grant")
@click.argument("role")
@click.option("--read", is_flag=True, help="Member of kb_reader: search functions only.")
@click.option("--write", is_flag=True, help="Member of kb_writer: what the loader needs.")
@click.option(
    "--statement-timeout",
    metavar="DURATION",
    help="With --read: the role's statement timeout in this database (e.g. 5s).",
)
@click.pass_obj
def grant(app: App, role: str, read: bool, write: bool, statement_timeout: str | None) -> None:
    """Let login ROLE search (--read) or load (--write) this knowledge base.

    --read: ROLE joins kb_reader and gets, in this database, search_path = kb, public (so
    SELECT * FROM hybrid_search('...') works unqualified) and the statement timeout. Takes effect
    at ROLE's next login. Exit code 2 when ROLE does not exist (nothing is granted).
    """
    from loader.db import connection
    from loader.errors import PgkbError
    from loader.ops.roles import grant as run_grant

    if statement_timeout is not None and not read:
        raise PgkbError("--statement-timeout goes with --read (a reader's queries)")
    with connection(app.settings()) as conn:
        done = run_grant(conn, role, read=read, write=write, statement_timeout=statement_timeout)
    for statement in done:
        click.echo(statement)
    click.echo(f"granted to {role}; it takes effect at the role's next login", err=True)
