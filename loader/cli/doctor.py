"""``pgkb db doctor``: check the knowledge base, explain what is wrong and how to fix it."""

from __future__ import annotations

import click

from loader.cli.base import App, emit_json
from loader.safety import echo


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_obj
def doctor(app: App, as_json: bool) -> None:
    """Check the server, pgvector, the schema and its functions, indexes, embeddings, dims,
    settings, roles and schema public. Exit code 0 when all pass, 1 when any fails."""
    from loader.ops.doctor import render, run_checks

    checks = run_checks(app.settings())
    failed = any(not c.ok for c in checks)
    if as_json:
        emit_json({"ok": not failed, "checks": [c.to_dict() for c in checks]})
    else:
        echo(render(checks))
    if failed:
        click.get_current_context().exit(1)
