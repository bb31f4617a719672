"""``pgkb docs list`` and ``pgkb docs show``: the documents, their metadata, outline and edges
(``graph``, ``stale`` and ``remove`` are in their own modules, hung here by ``loader.cli.main``)."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from loader.cli.base import App, emit_json
from loader.cli.filters import collection_option, joined
from loader.safety import echo, one_line


@click.group()
def docs() -> None:
    """The documents of the knowledge base: what each is, its outline and its relations, which
    are stale, and taking them out."""


@docs.command("list")
@click.option("--category", help="Only documents of this category.")
@click.option(
    "--state",
    type=click.Choice(["pending", "processing", "ready", "failed"]),
    help="List the submitted documents (kb.submit_document, uploads, agents) in this state "
    "instead, newest first, with their attempts and error.",
)
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of document objects.")
@click.pass_obj
def list_command(
    app: App,
    category: str | None,
    state: str | None,
    collections: tuple[str, ...],
    as_json: bool,
) -> None:
    """List documents: type, summary, entities, chunk and relation counts, updated time; with
    --state, the submitted documents in that state (pending, processing, ready, failed)."""
    from loader.db import queries
    from loader.db.session import connection
    from loader.graph.catalogue import list_documents

    if state is not None:
        _list_jobs(app, state, collections, as_json)
        return
    with connection(app.settings(collections=joined(collections)), read=True) as conn:
        rows = list_documents(conn, category)
        queue = conn.execute(queries.QUEUE_STATE).fetchone()
    if queue and any(queue[:3]) and not as_json:
        pending, processing, failed, _oldest = queue
        echo(
            f"submitted: {pending} pending, {processing} processing, {failed} failed "
            "(pgkb docs list --state ...)",
            err=True,
        )
    if as_json:
        emit_json(rows)
        return
    if not rows:
        echo("no documents" + (f" in category {category!r}" if category else ""), err=True)
        return
    for row in rows:
        echo(f"{one_line(row['title'])}  [{row['doc_type']}]  {row['id']}")
        echo(f"    {one_line(row['source_uri'])}")
        echo(
            f"    {row['chunks']} chunks · {row['edges_out']} edges out · {row['edges_in']} in"
            f" · updated {row['updated_at']:%Y-%m-%d %H:%M}"
            + (f" · category {row['category']}" if row["category"] else "")
        )
        if row["summary"]:
            echo("    " + textwrap.shorten(row["summary"], 160, placeholder=" ..."))
        if row["key_entities"]:
            echo("    entities: " + ", ".join(one_line(e) for e in row["key_entities"][:8]))
    echo(f"{len(rows)} document(s)", err=True)


@docs.command("show")
@click.argument("document")
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def show_command(app: App, document: str, collections: tuple[str, ...], as_json: bool) -> None:
    """Show one DOCUMENT (its id, source, or the end of its source such as
    sql-createindex.html): metadata, outline with chunk ranges, edges in and out.

    Exit code 1 when no document (or several) match."""
    from loader.db.session import connection
    from loader.graph.catalogue import find_document, show_document

    with connection(app.settings(collections=joined(collections)), read=True) as conn:
        info = show_document(conn, find_document(conn, document))
    if as_json:
        emit_json(info)
        return
    echo(render_document(info))


def render_document(info: dict[str, Any]) -> str:
    lines = [
        one_line(info["title"]),
        f"  id        {info['id']}",
        f"  source    {one_line(info['source_uri'])}",
        f"  type      {info['doc_type']} (metadata: {info['metadata_origin'] or 'none'})",
        f"  category  {info['category'] or '-'}",
        f"  chunks    {info['chunks']}",
        f"  updated   {info['updated_at']:%Y-%m-%d %H:%M:%S}",
    ]
    if info["summary"]:
        lines += ["", "Summary", textwrap.indent(textwrap.fill(info["summary"], 96), "  ")]
    if info["key_entities"]:
        lines += ["", "Entities", "  " + ", ".join(one_line(e) for e in info["key_entities"])]
    if info["toc"]:
        lines += ["", "Outline (chunks)"]
        for entry in info["toc"]:
            indent = "  " * int(entry.get("level", 1))
            span = f"[{entry.get('chunk_start')}-{entry.get('chunk_end')}]"
            lines.append(f"{indent}{one_line(entry.get('title', ''))}  {span}")
    for direction, label in (("edges_out", "Links to"), ("edges_in", "Linked from")):
        if info[direction]:
            lines += ["", f"{label} ({len(info[direction])})"]
            for edge in info[direction]:
                why = f'  "{edge["evidence"]}"' if edge["evidence"] else ""
                lines.append(
                    f"  {edge['relation_type']}/{edge['origin']}  {one_line(edge['title'])}"
                    f"  ({one_line(edge['source_uri'])}){one_line(why)}"
                )
    if info["unresolved_links"]:
        lines += ["", f"Links to documents not ingested ({len(info['unresolved_links'])})"]
        lines += [f"  {one_line(link['target_uri'])}" for link in info["unresolved_links"]]
    return "\n".join(lines)


def _list_jobs(app: App, state: str, collections: tuple[str, ...], as_json: bool) -> None:
    from psycopg.rows import class_row

    from loader.db import queries
    from loader.db.session import connection

    with (
        connection(app.settings(collections=joined(collections)), read=True) as conn,
        conn.cursor(row_factory=class_row(queries.JobState)) as cur,
    ):
        jobs = cur.execute(
            queries.DOCUMENT_JOBS, {"state": state, "limit": 1000, "job_id": None}
        ).fetchall()
    if as_json:
        emit_json([job.to_dict() for job in jobs])
        return
    if not jobs:
        echo(f"no submitted document is {state}", err=True)
        return
    for job in jobs:
        what = "remove" if job.action == "remove" else (job.title or job.source_uri)
        echo(f"{one_line(what)}  [{job.state}]  {job.id}")
        echo(f"    {one_line(job.source_uri)} · collection {job.collection}")
        echo(
            f"    submitted {job.submitted_at:%Y-%m-%d %H:%M:%S} by {job.submitted_by} · "
            f"{job.attempts} attempt(s)"
            + (f" · {job.chunks} chunks" if job.state == "ready" and job.action == "put" else "")
        )
        if job.error:
            echo("    error: " + one_line(job.error))
    echo(f"{len(jobs)} submitted document(s) {state}", err=True)
