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
import re
from collections.abc import Sequence
from typing import Any

from loader.errors import PgkbError

CATALOGUE_SIZE = 15

SQL_BY_ID = "SELECT id::text FROM kb.documents WHERE id = %s"
SQL_BY_SOURCE = "SELECT id::text FROM kb.documents WHERE source_uri = %s"
SQL_BY_SUFFIX = """
SELECT id::text, source_uri FROM kb.documents
 WHERE right(source_uri, length(%(suffix)s)) = %(suffix)s
 ORDER BY source_uri LIMIT 6
"""
SQL_LIST = """
SELECT d.id::text, d.title, d.source_uri, d.category, d.doc_type, d.summary, d.key_entities,
       (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer AS chunks,
       (SELECT count(*) FROM kb.document_relations r
         WHERE r.source_id = d.id)::integer AS edges_out,
       (SELECT count(*) FROM kb.document_relations r WHERE r.target_id = d.id)::integer AS edges_in,
       d.updated_at
  FROM kb.documents d
 WHERE %(category)s::text IS NULL OR d.category = %(category)s
 ORDER BY d.title, d.source_uri
 LIMIT %(limit)s
"""
SQL_SHOW = """
SELECT d.id::text, d.title, d.source_uri, d.category, d.doc_type, d.summary, d.key_entities,
       d.toc, d.metadata_origin, d.metadata, d.created_at, d.updated_at,
       (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer AS chunks
  FROM kb.documents d WHERE d.id = %s
"""
SQL_EDGES = """
SELECT 'out', r.relation_type, r.origin, r.evidence, o.id::text, o.title, o.source_uri
  FROM kb.document_relations r JOIN kb.documents o ON o.id = r.target_id
 WHERE r.source_id = %(id)s
UNION ALL
SELECT 'in', r.relation_type, r.origin, r.evidence, o.id::text, o.title, o.source_uri
  FROM kb.document_relations r JOIN kb.documents o ON o.id = r.source_id
 WHERE r.target_id = %(id)s
 ORDER BY 1 DESC, 6, 5, 2
"""
SQL_UNRESOLVED = """
SELECT l.target_uri, l.anchor FROM kb.document_links l
 WHERE l.source_id = %s
   AND NOT EXISTS (SELECT 1 FROM kb.documents d WHERE d.source_uri = l.target_uri)
 ORDER BY l.target_uri
"""
SQL_EXPLORE = """
SELECT document_id::text, title, source_uri, category, doc_type, summary, key_entities,
       distance, path, edges
  FROM kb.explore_graph(start_document => %(start)s, query_text => %(query)s,
                        max_depth => %(depth)s, relation_types => %(types)s,
                        filters => %(filters)s::jsonb, document_ids => %(ids)s::uuid[],
                        max_results => %(limit)s)
"""

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class DocumentNotFound(PgkbError):
    """No document (or more than one) matches what the user named."""

    exit_code = 1


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


def find_document(conn: Any, ref: str) -> str:
    """The id of the document ``ref`` names: its uuid, its source_uri, or the end of exactly one
    source_uri (``sql-createindex.html``). :class:`DocumentNotFound` otherwise."""
    ref = ref.strip()
    if _UUID.match(ref):
        row = conn.execute(SQL_BY_ID, (ref,)).fetchone()
        if row:
            return str(row[0])
    row = conn.execute(SQL_BY_SOURCE, (ref,)).fetchone()
    if row:
        return str(row[0])
    if ref:
        suffix = ref if ref.startswith("/") else "/" + ref
        rows = conn.execute(SQL_BY_SUFFIX, {"suffix": suffix}).fetchall()
        if len(rows) == 1:
            return str(rows[0][0])
        if len(rows) > 1:
            names = ", ".join(r[1] for r in rows[:5])
            raise DocumentNotFound(
                f"{ref!r} matches several documents: {names}",
                hint="give more of the path, the full source, or the document id",
            )
    raise DocumentNotFound(
        f"no document {ref!r} in the knowledge base",
        hint="`pgkb docs list` shows the documents (id and source)",
    )


def list_documents(
    conn: Any, category: str | None = None, limit: int = 10_000
) -> list[dict[str, Any]]:
    rows = conn.execute(SQL_LIST, {"category": category, "limit": limit}).fetchall()
    keys = ("id", "title", "source_uri", "category", "doc_type", "summary", "key_entities",
            "chunks", "edges_out", "edges_in", "updated_at")  # fmt: skip
    return [dict(zip(keys, row, strict=True)) for row in rows]


def show_document(conn: Any, document_id: str) -> dict[str, Any]:
    row = conn.execute(SQL_SHOW, (document_id,)).fetchone()
    if row is None:
        raise DocumentNotFound(f"no document {document_id} in the knowledge base")
    keys = ("id", "title", "source_uri", "category", "doc_type", "summary", "key_entities", "toc",
            "metadata_origin", "metadata", "created_at", "updated_at", "chunks")  # fmt: skip
    info = dict(zip(keys, row, strict=True))
    info["edges_out"], info["edges_in"] = [], []
    for direction, kind, origin, evidence, other, title, uri in conn.execute(
        SQL_EDGES, {"id": document_id}
    ).fetchall():
        info[f"edges_{direction}"].append(
            {"relation_type": kind, "origin": origin, "evidence": evidence, "document_id": other,
             "title": title, "source_uri": uri}
        )  # fmt: skip
    info["unresolved_links"] = [
        {"target_uri": uri, "anchor": anchor}
        for uri, anchor in conn.execute(SQL_UNRESOLVED, (document_id,)).fetchall()
    ]
    return info


def explore(
    conn: Any,
    *,
    start: str | None = None,
    query: str | None = None,
    depth: int = 1,
    relation_types: Sequence[str] | None = None,
    filters: dict[str, Any] | None = None,
    document_ids: Sequence[str] | None = None,
    limit: int = 50,
) -> list[GraphNode]:
    """Rows of ``kb.explore_graph`` (its errors, e.g. depth 4, raise psycopg errors)."""
    rows = conn.execute(
        SQL_EXPLORE,
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
        GraphNode(r[0], r[1], r[2], r[3], r[4], r[5], list(r[6] or []), r[7], r[8], r[9] or [])
        for r in rows
    ]


# --- for the agent and `pgkb ask` ----------------------------------------------------------------


def catalogue_for_question(
    conn: Any,
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
    conn: Any, ids: list[str], filters: dict[str, Any] | None
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


def related_from_graph(
    conn: Any,
    document_ids: Sequence[str],
    *,
    filters: dict[str, Any] | None = None,
    limit: int = 10,
) -> list[tuple[str, str, str, str]]:
    """``(document id, title, source_uri, relation)`` of the documents one hop from
    ``document_ids`` in the graph (not those themselves), within ``filters``; relation is the
    edge's type, ``references`` before the rest, then by title."""
    seen = set(document_ids)
    found: dict[str, tuple[str, str, str, str]] = {}
    for doc_id in document_ids:
        for node in explore(conn, start=doc_id, depth=1, filters=filters, limit=100):
            if node.document_id in seen or node.document_id in found or not node.path:
                continue
            found[node.document_id] = (
                node.document_id,
                node.title,
                node.source_uri,
                node.path[-1]["relation_type"],
            )
    ranked = sorted(found.values(), key=lambda r: (r[3] != "references", r[1], r[0]))
    return ranked[:limit]
