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
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of document objects.")
@click.pass_obj
def list_command(
    app: App, category: str | None, collections: tuple[str, ...], as_json: bool
) -> None:
    """List documents: type, summary, entities, chunk and relation counts, updated time."""
    from loader.db.session import connection
    from loader.graph.catalogue import list_documents

    with connection(app.settings(collections=joined(collections)), read=True) as conn:
        rows = list_documents(conn, category)
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
