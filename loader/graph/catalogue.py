"""Reading the graph: documents, their metadata and edges, for the CLI, the agent and ``ask``.

The agent's first message carries :func:`format_catalogue` of :func:`catalogue_for_question`
(up to 15 documents relevant to the question, with summary, type, entities and the edges among
them); ``pgkb ask`` lists :func:`related_from_graph` (graph neighbours of the documents an
answer cites). Both go through ``kb.explore_graph`` with the caller's filters, so a question
scoped to one category never sees another category's documents.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.errors import PgkbError

CATALOGUE_SIZE = 15


class DocumentNotFound(PgkbError):
    """No document (or more than one) matches what the user named."""

    exit_code = 1


class AmbiguousDocument(DocumentNotFound):
    """More than one document matches what the user named."""


@dataclasses.dataclass(frozen=True)
class GraphNode:
    document_id: str
    title: str
    source_uri: str
    category: str | None
    doc_type: str
    summary: str | None
    key_entities: list[str]
    distance: int | None
    path: list[dict[str, Any]] | None
    edges: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def find_document(
    conn: psycopg.Connection[Any], ref: str, *, filters: dict[str, Any] | None = None
) -> str:
    """The id of the document ``ref`` names: its uuid, its source_uri, or the end of exactly one
    source_uri (``sql-createindex.html``), within ``filters`` (kb.find_documents).
    :class:`DocumentNotFound` otherwise."""
    ref = ref.strip()
    with conn.cursor(row_factory=class_row(queries.DocumentRef)) as cur:
        rows = cur.execute(
            queries.FIND_DOCUMENTS, {"ref": ref, "filters": json.dumps(filters or {})}
        ).fetchall()
    if len(rows) == 1:
        return str(rows[0].document_id)
    if len(rows) > 1:
        names = ", ".join(r.source_uri for r in rows[:5])
        raise AmbiguousDocument(
            f"{ref!r} matches several documents: {names}",
            hint="give more of the path, the full source, or the document id",
        )
    raise DocumentNotFound(
        f"no document {ref!r} in the knowledge base"
        + (f" (within {json.dumps(filters)})" if filters else ""),
        hint="`pgkb docs list` shows the documents (id and source)",
    )


def list_documents(
    conn: psycopg.Connection[Any],
    category: str | None = None,
    limit: int = 10_000,
    *,
    filters: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The catalogue (kb.document_list): documents within ``category`` and ``filters``, by
    title, at most ``limit``."""
    merged = dict(filters or {})
    if category is not None:
        merged["category"] = category
    with conn.cursor(row_factory=class_row(queries.DocumentListRow)) as cur:
        rows = cur.execute(queries.LIST_DOCUMENTS, {"filters": json.dumps(merged), "limit": limit})
        return [dataclasses.asdict(row) for row in rows.fetchall()]


def show_document(conn: psycopg.Connection[Any], document_id: str) -> dict[str, Any]:
    """One document with its outline, edges in and out and unresolved links (kb.show_document)."""
    with conn.cursor(row_factory=class_row(queries.DocumentDetailRow)) as cur:
        row = cur.execute(queries.SHOW_DOCUMENT, (document_id,)).fetchone()
    if row is None:
        raise DocumentNotFound(f"no document {document_id} in the knowledge base")
    return dataclasses.asdict(row)


def explore(
    conn: psycopg.Connection[Any],
    *,
    start: uuid.UUID | str | None = None,
    query: str | None = None,
    depth: int = 1,
    relation_types: Sequence[str] | None = None,
    filters: dict[str, Any] | None = None,
    document_ids: Sequence[uuid.UUID | str] | None = None,
    limit: int = 50,
) -> list[GraphNode]:
    """Rows of ``kb.explore_graph`` (its errors, e.g. depth 4, raise psycopg errors).

    Ids in: UUIDs (the answer side's) or their text; ids out (``GraphNode.document_id`` and
    the ids in its ``path`` and ``edges``): text, like everything the graph reads from JSON."""
    with conn.cursor(row_factory=class_row(queries.GraphNodeRow)) as cur:
        rows = cur.execute(
            queries.EXPLORE_GRAPH,
            {
                "start": start,
                "query": query,
                "depth": depth,
                "types": list(relation_types) if relation_types else None,
                "filters": json.dumps(filters or {}),
                "ids": list(document_ids) if document_ids else None,
                "limit": limit,
            },
        ).fetchall()
    return [
        GraphNode(r.document_id, r.title, r.source_uri, r.category, r.doc_type, r.summary,
                  list(r.key_entities or []), r.distance, r.path, r.edges or [])
        for r in rows
    ]  # fmt: skip


# --- for the agent and `pgkb ask` ----------------------------------------------------------------


def catalogue_for_question(
    conn: psycopg.Connection[Any],
    question: str,
    *,
    filters: dict[str, Any] | None = None,
    document_ids: Sequence[str] | None = None,
    limit: int = CATALOGUE_SIZE,
) -> list[GraphNode]:
    """Up to ``limit`` documents relevant to ``question``: the ones its words match and their
    neighbours (kb.explore_graph query mode), topped up with the most connected documents when
    fewer match; the edges among them in each node's ``edges``."""
    nodes = explore(conn, query=question, filters=filters, document_ids=document_ids, limit=limit)
    if len(nodes) < limit:
        have = {n.document_id for n in nodes}
        for node in explore(conn, filters=filters, document_ids=document_ids, limit=limit):
            if node.document_id not in have and len(nodes) < limit:
                nodes.append(dataclasses.replace(node, edges=[]))
                have.add(node.document_id)
        ids = [n.document_id for n in nodes]
        edges = _edges_among(conn, ids, filters)
        nodes = [dataclasses.replace(n, edges=edges.get(n.document_id, [])) for n in nodes]
    return nodes


def _edges_among(
    conn: psycopg.Connection[Any], ids: list[str], filters: dict[str, Any] | None
) -> dict[str, list[dict[str, Any]]]:
    if not ids:
        return {}
    rows = explore(conn, filters=filters, document_ids=ids, limit=max(1, min(len(ids), 500)))
    return {r.document_id: r.edges for r in rows}


def format_catalogue(nodes: Sequence[GraphNode], summary_chars: int = 240) -> str:
    """The catalogue as text for a model: one numbered line per document, then the edges."""
    if not nodes:
        return "Catalogue: the knowledge base holds no matching documents."
    number = {n.document_id: i for i, n in enumerate(nodes, 1)}
    lines = [f"Catalogue ({len(nodes)} documents; [n] = document number):"]
    for i, node in enumerate(nodes, 1):
        summary = " ".join((node.summary or "").split())
        if len(summary) > summary_chars:
            summary = summary[: summary_chars - 4].rsplit(" ", 1)[0] + " ..."
        entities = ", ".join(node.key_entities[:6])
        lines.append(
            f"[{i}] {node.title} ({node.doc_type}; id {node.document_id})"
            + (f": {summary}" if summary else "")
            + (f" Entities: {entities}." if entities else "")
        )
    edges = [
        f"[{number[n.document_id]}] {e['relation_type']} [{number[e['target_id']]}]"
        for n in nodes
        for e in n.edges
        if e["target_id"] in number
    ]
    if edges:
        lines.append("Edges: " + "; ".join(edges))
    return "\n".join(lines)


Neighbour = tuple[uuid.UUID, str, str, str]
"""``(document id, title, source_uri, relation)`` of a document one hop away; relation is the
type of the edge that reaches it."""


def graph_neighbours(
    conn: psycopg.Connection[Any],
    document_ids: Sequence[uuid.UUID],
    *,
    filters: dict[str, Any] | None = None,
) -> dict[uuid.UUID, list[Neighbour]]:
    """For each of ``document_ids``, the documents one hop away in the graph (not itself),
    within ``filters``, in ``kb.explore_graph`` order. Fetched before an answer is built, so
    building it (:func:`rank_related`) reads nothing."""
    starts = list(dict.fromkeys(document_ids))
    found: dict[uuid.UUID, list[Neighbour]] = {doc_id: [] for doc_id in starts}
    if not starts:
        return found
    with conn.cursor(row_factory=class_row(queries.GraphNeighbourRow)) as cur:
        rows = cur.execute(
            queries.GRAPH_NEIGHBOURS,
            {"ids": starts, "filters": json.dumps(filters or {}), "limit": 100},
        ).fetchall()
    for r in rows:
        found[r.start_id].append((r.document_id, r.title, r.source_uri, r.relation_type))
    return found


def rank_related(
    document_ids: Sequence[uuid.UUID],
    neighbours: Mapping[uuid.UUID, Sequence[Neighbour]],
    limit: int = 10,
) -> list[Neighbour]:
    """The documents one hop from ``document_ids`` (not those themselves), from their fetched
    ``neighbours``: ``references`` before the rest, then by title."""
    seen = {str(i) for i in document_ids}
    found: dict[str, Neighbour] = {}
    for doc_id in document_ids:
        for row in neighbours.get(doc_id, ()):
            key = str(row[0])
            if key not in seen and key not in found:
                found[key] = row
    ranked = sorted(found.values(), key=lambda r: (r[3] != "references", r[1], r[0]))
    return ranked[:limit]


def related_from_graph(
    conn: psycopg.Connection[Any],
    document_ids: Sequence[uuid.UUID],
    *,
    filters: dict[str, Any] | None = None,
    limit: int = 10,
) -> list[Neighbour]:
    """``(document id, title, source_uri, relation)`` of the documents one hop from
    ``document_ids`` in the graph (not those themselves), within ``filters``; relation is the
    edge's type, ``references`` before the rest, then by title."""
    return rank_related(document_ids, graph_neighbours(conn, document_ids, filters=filters), limit)
