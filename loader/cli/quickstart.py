"""``pgkb quickstart``: the default database, the sample corpus, and two questions, end to end."""

from __future__ import annotations

import click

from loader.cli.ask import ask
from loader.cli.base import App
from loader.errors import PgkbError

QUICKSTART_QUESTIONS = (
    "How can I build an index without locking out writes to the table?",
    "How do I configure Oracle Data Guard for a standby database?",
)


@click.command()
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
    from loader.db.connect import database_url, redact
    from loader.db.migrations import upgrade
    from loader.db.status import schema_status

    settings = app.settings()
    url = database_url(settings)
    if not settings.database_url:
        click.echo(f"using the embedded PostgreSQL server, data in {settings.pgdata}", err=True)
    upgrade(url)
    click.echo(f"kb schema is up to date on {redact(url)}", err=True)

    from loader.cli.ingest import summary_line
    from loader.ingest.pipeline import ingest_paths
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
