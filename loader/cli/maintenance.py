"""``pgkb db reindex`` and ``pgkb db vacuum``: index care, without blocking searches."""

from __future__ import annotations

import click

from loader.cli.base import App
from loader.safety import echo, secho


def _say(what: str) -> None:
    echo(what, err=True)


@click.command()
@click.pass_obj
def reindex(app: App) -> None:
    """Rebuild every kb index with REINDEX INDEX CONCURRENTLY (also invalid ones), after
    building the HNSW index of any model that lacks it (a bulk load killed before it could) and
    building again, with its new parameters, the HNSW index of a corpus that crossed a size tier
    (kb.hnsw_parameters: 250,000 embeddings; writes wait and vector searches are exact while it
    builds). An index built with explicit hnsw_m / hnsw_ef_construction is kept as it is.

    Searches and ingestion keep running; run as the kb owner. Exit code 1 when an index could
    not be (re)built (it is named; the others are rebuilt)."""
    from loader.db.connect import connect, database_url
    from loader.ops.maintenance import build_missing, resize
    from loader.ops.maintenance import reindex as run_reindex

    settings = app.settings()
    conn = connect(database_url(settings), autocommit=True, register=False)
    try:
        built = build_missing(
            conn,
            (settings.hnsw_m, settings.hnsw_ef_construction),
            lambda name: _say(f"building the missing HNSW index kb.{name}"),
        )
        resized = resize(conn, lambda model: _say(f"checking the HNSW size of model {model}"))
        just_built = frozenset(str(r["index"]) for r in resized if r.get("resized"))
        done = run_reindex(conn, lambda name: _say(f"reindexing kb.{name}"), just_built)
    finally:
        conn.close()
    for r in resized:
        if r["error"]:
            secho(
                f"Error: the HNSW index of model {r['model_id']} could not be resized: "
                f"{r['error']}",
                fg="red",
                err=True,
            )
        elif r["resized"]:
            before = r["previous"]
            echo(
                f"resized kb.{r['index']} for {r['embeddings']:,} embeddings: m "
                f"{before['m']} -> {r['m']}, ef_construction {before['ef_construction']} -> "
                f"{r['ef_construction']}, ef_search {before['ef_search']} -> {r['ef_search']}"
            )
    for b in built:
        if b["skipped"]:
            echo(f"kb.{b['index']} not built: {b['skipped']}", err=True)
        elif b["built"]:
            echo(f"built the missing HNSW index kb.{b['index']}")
        else:
            secho(
                f"Error: the missing HNSW index kb.{b['index']} could not be built: {b['error']}",
                fg="red",
                err=True,
            )
    failed = [d for d in done if d["error"]]
    for d in failed:
        secho(f"Error: kb.{d['index']} could not be rebuilt: {d['error']}", fg="red", err=True)
        echo(
            f"  hint: if it is an index you do not need, DROP INDEX CONCURRENTLY kb.{d['index']}",
            err=True,
        )
    rebuilt = sum(1 for d in done if not d["error"])
    echo(f"rebuilt {rebuilt} of {len(done)} index(es)")
    if failed or any(b["error"] for b in built) or any(r["error"] for r in resized):
        click.get_current_context().exit(1)


@click.command()
@click.pass_obj
def vacuum(app: App) -> None:
    """VACUUM (ANALYZE) every kb table: reclaim dead rows, refresh the planner's statistics."""
    from loader.db.connect import connect, database_url
    from loader.ops.maintenance import vacuum as run_vacuum

    conn = connect(database_url(app.settings()), autocommit=True, register=False)
    try:
        done = run_vacuum(conn, lambda name: _say(f"vacuuming kb.{name}"))
    finally:
        conn.close()
    echo(f"vacuumed and analyzed {len(done)} table(s)")
