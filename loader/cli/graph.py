"""``pgkb docs graph``: the documents around one document (kb.explore_graph), as a tree, JSON or
DOT."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from loader.cli.base import App, emit_json
from loader.cli.filters import collection_option, joined
from loader.graph.relations import RELATION_TYPES
from loader.safety import echo, one_line

if TYPE_CHECKING:
    from loader.graph.catalogue import GraphNode


@click.command()
@click.argument("document")
@click.option(
    "--depth", type=click.IntRange(1, 3), default=1, show_default=True, help="Hops (1 to 3)."
)
@click.option(
    "--type",
    "relation_types",
    type=click.Choice(RELATION_TYPES),
    multiple=True,
    help="Follow only this relation type; repeat for several (default: all).",
)
@click.option("--category", help="Only documents of this category.")
@collection_option
@click.option(
    "--limit",
    type=click.IntRange(1, 500),
    default=100,
    show_default=True,
    help="At most N documents.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tree", "json", "dot"]),
    default="tree",
    show_default=True,
    help="tree: readable; json: the rows of kb.explore_graph; dot: for Graphviz (dot -Tsvg).",
)
@click.pass_obj
def graph(
    app: App,
    document: str,
    depth: int,
    relation_types: tuple[str, ...],
    category: str | None,
    collections: tuple[str, ...],
    limit: int,
    fmt: str,
) -> None:
    """The documents DOCUMENT relates to, up to --depth hops away, in both directions.

    DOCUMENT is an id, a source, or the end of a source (sql-createindex.html). Exit code 1
    when no document (or several) match."""
    from loader.db.session import connection
    from loader.graph.catalogue import explore, find_document

    with connection(app.settings(collections=joined(collections)), read=True) as conn:
        start = find_document(conn, document)
        nodes = explore(
            conn,
            start=start,
            depth=depth,
            relation_types=relation_types or None,
            filters={"category": category} if category else None,
            limit=limit,
        )
    if fmt == "json":
        emit_json([n.to_dict() for n in nodes])
    elif fmt == "dot":
        echo(render_dot(nodes))
    else:
        echo(render_tree(nodes))


def render_tree(nodes: list[GraphNode]) -> str:
    """The start, then each document under the one it was reached from, with the edge."""
    if not nodes:
        return "(the document is outside the given category)"
    by_id = {n.document_id: n for n in nodes}
    children: dict[str, list[tuple[str, GraphNode]]] = {}
    root = nodes[0]
    for node in nodes[1:]:
        if not node.path:
            continue
        edge = node.path[-1]
        parent = edge["source_id"] if edge["target_id"] == node.document_id else edge["target_id"]
        arrow = (
            f"--{edge['relation_type']}-->"
            if edge["source_id"] == parent
            else f"<--{edge['relation_type']}--"
        )
        children.setdefault(parent, []).append((arrow, node))
    lines = [f"{one_line(root.title)}  [{root.doc_type}]  {one_line(root.source_uri)}"]

    def walk(parent: str, indent: str) -> None:
        for arrow, node in children.get(parent, []):
            lines.append(
                f"{indent}{arrow} {one_line(node.title)}  [{node.doc_type}]  "
                f"{one_line(node.source_uri)}"
            )
            if node.document_id in by_id:
                walk(node.document_id, indent + "    ")

    walk(root.document_id, "  ")
    return "\n".join(lines)


def render_dot(nodes: list[GraphNode]) -> str:
    """A Graphviz digraph of the documents and the edges among them."""
    lines = ["digraph pgkb {", "  node [shape=box];"]
    for node in nodes:
        style = ", style=bold" if node.distance == 0 else ""
        lines.append(f"  {json.dumps(node.document_id)} [label={json.dumps(node.title)}{style}];")
    for node in nodes:
        for edge in node.edges:
            lines.append(
                f"  {json.dumps(node.document_id)} -> {json.dumps(edge['target_id'])}"
                f" [label={json.dumps(edge['relation_type'])}];"
            )
    lines.append("}")
    return "\n".join(lines)
