"""``pgkb stats``: what the knowledge base holds (kb.stats())."""

from __future__ import annotations

import click

from loader.cli.base import App, emit_json
from loader.cli.filters import collection_option, joined
from loader.safety import echo


@click.command()
@click.option(
    "--runs",
    type=click.IntRange(0, 1000),
    default=5,
    show_default=True,
    help="How many of the last ingestion runs to show.",
)
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Print kb.stats() as JSON.")
@click.pass_obj
def stats(app: App, runs: int, collections: tuple[str, ...], as_json: bool) -> None:
    """Documents, chunks, embeddings per model, categories with their oldest and newest update,
    table and index sizes, the active model and the last ingestion runs."""
    from loader.db.session import connection
    from loader.ops.stats import render
    from loader.ops.stats import stats as read_stats

    with connection(app.settings(collections=joined(collections)), read=True) as conn:
        data = read_stats(conn, runs)
    if as_json:
        emit_json(data)
    else:
        echo(render(data))
