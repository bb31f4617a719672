"""``pgkb quickstart``: a demo database, the sample corpus, and two questions, end to end."""

from __future__ import annotations

import click

from loader import resources
from loader.cli.ask import ask
from loader.cli.base import App
from loader.cli.ingest import summary_line
from loader.errors import PgkbError
from loader.safety import echo, redact, secho

QUICKSTART_QUESTIONS = (
    "How can I build an index without locking out writes to the table?",
    "How do I configure Oracle Data Guard for a standby database?",
)


@click.command()
@click.option(
    "--demo-url",
    metavar="URL",
    envvar="PGKB_DEMO_DATABASE_URL",
    show_envvar=True,
    help="Database for the sample (default: the configured database's name + _demo, created "
    "on the same server).",
)
@click.option(
    "--remove",
    is_flag=True,
    help="Drop the demo database (the sample) and exit; your knowledge base is not touched.",
)
@click.pass_context
def quickstart(ctx: click.Context, demo_url: str | None, remove: bool) -> None:
    """Ingest the sample corpus into a demo database of its own and answer two questions.

    Creates a demo database beside your knowledge base (pgkb_demo on the embedded server, else
    the configured database's name + _demo on the same server, or --demo-url), creates the kb
    schema there, ingests the bundled sample corpus (65 pages of the PostgreSQL 15 manual;
    unchanged pages are skipped on later runs), prints the status, then asks one question the
    corpus answers (a cited answer) and one it cannot ("I don't know"). Your own knowledge base
    (pgkb ingest, search, ask) never sees the sample; pgkb quickstart --remove drops it.
    """
    app = ctx.find_object(App)
    assert app is not None
    from loader.db.connect import database_url
    from loader.db.demo import create_demo_database, drop_demo_database
    from loader.db.migrations import upgrade
    from loader.db.status import schema_status

    settings = app.settings()
    embedded = not settings.database_url
    if embedded:
        echo(f"using the embedded PostgreSQL server, data in {settings.pgdata}", err=True)
    user_url = database_url(settings)
    if remove:
        dropped = drop_demo_database(user_url, demo_url)
        if dropped is None:
            echo("there is no demo database to remove; nothing was changed")
        else:
            echo(f"removed the demo database {dropped}; your knowledge base is untouched")
        return
    if embedded:
        # the embedded server's knowledge base is pgkb's own: ready (empty) for `pgkb ingest`
        upgrade(user_url)
    url = demo_url or create_demo_database(user_url)
    echo(
        f"the sample goes into the demo database {redact(url)}, apart from your knowledge base "
        f"{redact(user_url)} (remove it with: pgkb quickstart --remove)",
        err=True,
    )
    # every step below (ingest, status, ask) works on the demo database
    app.overrides = {**app.overrides, "database_url": url}
    app._settings = None
    settings = app.settings()
    upgrade(url)
    echo(f"kb schema is up to date on {redact(url)}", err=True)

    from loader.cli.progress import ProgressDisplay
    from loader.ingest.pipeline import ingest_paths

    corpus = resources.sample_corpus_dir()
    if _holds_documents(url):
        echo(f"ingesting the sample corpus {corpus} (unchanged pages are skipped)", err=True)
    else:
        echo(
            f"ingesting the sample corpus {corpus}: first run, every page is embedded once "
            "(minutes on a CPU; later runs skip unchanged pages)",
            err=True,
        )
    with ProgressDisplay() as progress:
        report = ingest_paths(settings, [corpus], prune=True, progress=progress)
    echo(summary_line(report.to_dict()), err=True)
    for failure in report.failed:
        echo(f"failed: {failure['source']}: {failure['reason']}", err=True)
    if report.aborted:
        raise PgkbError(f"ingesting the sample corpus stopped: {report.aborted}")
    if report.failed:
        raise PgkbError(
            f"{len(report.failed)} page(s) of the sample corpus could not be ingested "
            "(listed above), so the knowledge base is incomplete",
            hint="the bundled pages are known to ingest: check the installation "
            "(pip install -e . installs the extraction libraries) and re-run pgkb quickstart",
        )
    status = {**schema_status(settings), "embedded": embedded}
    for key, value in status.items():
        echo(f"{key:>18}: {value}")
    for question in QUICKSTART_QUESTIONS:
        echo()
        secho(f"$ pgkb ask {question!r}", bold=True)
        ctx.invoke(ask, question=(question,))
    echo()
    echo(
        f"The sample is in its own database; your knowledge base ({redact(user_url)}) holds "
        "none of it. Add your own documents:\n"
        '  pgkb ingest ~/notes && pgkb ask "..."\n'
        f'Try the sample:  pgkb --database-url "{_shown(url)}" search "vacuum"\n'
        "Remove it:       pgkb quickstart --remove"
    )


def _holds_documents(url: str) -> bool:
    """Whether the demo database holds documents already (a later run, not the first)."""
    from loader.db.connect import connect
    from loader.db.queries import ANY_DOCUMENT

    conn = connect(url, register=False)
    try:
        row = conn.execute(ANY_DOCUMENT).fetchone()
        return bool(row and row[0])
    finally:
        conn.close()


def _shown(url: str) -> str:
    """``url`` as the user can paste it: redacted only when it holds a password (the embedded
    server's URL has none: its password file is named by ``passfile``)."""
    import psycopg

    try:
        password = psycopg.conninfo.conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        return redact(url)
    return redact(url) if password else url
