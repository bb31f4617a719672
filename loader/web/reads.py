"""What the web pages read, each through a ``kb`` function on one of the server's pooled
connections (so the role's grants and the served ``--collection`` scope apply in SQL), returned
as typed values the templates render.

Nothing here writes, and nothing reads a table directly: ``kb.document_page``,
``kb.document_facets``, ``kb.show_document``, ``kb.read_document``, ``kb.explore_graph``,
``kb.query_terms`` (for the highlighted terms), ``kb.collection_list``, ``kb.stats`` and
``kb.ingest_activity`` (of whose runs :func:`open_failures` keeps the failures not settled
since).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.graph.catalogue import GraphNode, explore

PAGE_SIZE = 50
READ_BUDGET = 3000
"""Tokens of document text one document page shows at most (kb.read_document's budget)."""
GRAPH_CAP = 200
"""Nodes the graph page draws at most: beyond, it says so and draws the nearest / most
connected 200."""
DOC_TYPES = ("policy", "manual", "technical_spec", "report", "reference", "general")
RELATION_TYPES = ("references", "supersedes", "supplements", "contradicts", "depicts")
MARK_START, MARK_END = "\ue000", "\ue001"
"""What ``ts_headline`` puts around a query term; removed from the text first, so only the
function's own markers remain."""
HEADLINE_OPTIONS = (
    f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=40, MinWords=18, "
    'MaxFragments=2, FragmentDelimiter=" … "'
)


# --- the documents list ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ListQuery:
    """The list's filters, sort and page, as the URL gives them."""

    collection: str | None = None
    category: str | None = None
    doc_type: str | None = None
    words: str | None = None
    sort: str = "title"
    page: int = 1

    def filters(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.collection:
            out["collections"] = [self.collection]
        if self.category:
            out["category"] = self.category
        return out

    def params(self, **change: Any) -> dict[str, str]:
        """The query string of this list with ``change`` applied (empty values left out)."""
        values = dataclasses.replace(self, **change)
        raw = {
            "collection": values.collection,
            "category": values.category,
            "type": values.doc_type,
            "q": values.words,
            "sort": None if values.sort == "title" else values.sort,
            "page": None if values.page == 1 else str(values.page),
        }
        return {k: v for k, v in raw.items() if v}


@dataclasses.dataclass(frozen=True)
class Facet:
    value: str | None
    documents: int


@dataclasses.dataclass(frozen=True)
class DocumentPage:
    rows: list[queries.DocumentPageRow]
    total: int
    page: int
    pages: int
    facets: dict[str, list[Facet]]


def document_page(
    conn: psycopg.Connection[Any],
    query: ListQuery,
    *,
    category_scope: str | None,
    stale_days: int,
    size: int = PAGE_SIZE,
) -> DocumentPage:
    """One page of the catalogue and the values its filters offer."""
    filters = query.filters()
    if category_scope:
        filters["category"] = category_scope
    stale = f"{stale_days} days" if stale_days > 0 else None
    params = {
        "filters": json.dumps(filters),
        "doc_type": query.doc_type,
        "words": query.words,
        "sort": query.sort,
        "stale_after": stale,
        "offset": (query.page - 1) * size,
        "size": size,
        "ids": None,
    }
    with conn.cursor(row_factory=class_row(queries.DocumentPageRow)) as cur:
        rows = cur.execute(queries.DOCUMENT_PAGE, params).fetchall()
    facets = document_facets(conn, category_scope=category_scope)
    total = rows[0].total if rows else 0
    if not rows and query.page > 1:  # past the end: how many there are, for the message
        with conn.cursor(row_factory=class_row(queries.DocumentPageRow)) as cur:
            first = cur.execute(queries.DOCUMENT_PAGE, {**params, "offset": 0, "size": 1})
            head = first.fetchone()
        total = head.total if head else 0
    return DocumentPage(rows, total, query.page, max(1, math.ceil(total / size)), facets)


def document_facets(
    conn: psycopg.Connection[Any], *, category_scope: str | None
) -> dict[str, list[Facet]]:
    """The collections, categories and types the filter menus offer, with their counts."""
    facet_filters = {"category": category_scope} if category_scope else {}
    with conn.cursor(row_factory=class_row(queries.FacetRow)) as cur:
        found = cur.execute(
            queries.DOCUMENT_FACETS, {"filters": json.dumps(facet_filters)}
        ).fetchall()
    facets: dict[str, list[Facet]] = {"collection": [], "category": [], "doc_type": []}
    for row in found:
        facets.setdefault(row.facet, []).append(Facet(row.value, row.documents))
    return facets


def document_row(
    conn: psycopg.Connection[Any], document_id: str, *, stale_days: int
) -> queries.DocumentPageRow | None:
    """The list's row of one document (collection, counts, stale), None when it is not
    readable."""
    params = {
        "filters": "{}",
        "doc_type": None,
        "words": None,
        "sort": "title",
        "stale_after": f"{stale_days} days" if stale_days > 0 else None,
        "offset": 0,
        "size": 1,
        "ids": [document_id],
    }
    with conn.cursor(row_factory=class_row(queries.DocumentPageRow)) as cur:
        return cur.execute(queries.DOCUMENT_PAGE, params).fetchone()


def document_total(conn: psycopg.Connection[Any], filters: dict[str, Any]) -> int:
    """How many documents within ``filters`` this session may read."""
    row = conn.execute(queries.DOCUMENT_TOTAL, {"filters": json.dumps(filters)}).fetchone()
    return int(row[0]) if row else 0


def ingest_activity(conn: psycopg.Connection[Any], runs: int = 10) -> list[queries.IngestRunRow]:
    """The newest ingestion runs (none for a session scoped to some collections)."""
    with conn.cursor(row_factory=class_row(queries.IngestRunRow)) as cur:
        return cur.execute(queries.INGEST_ACTIVITY, (runs,)).fetchall()


# --- one document ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Chunk:
    chunk_id: int
    index: int
    heading_path: str
    content: str
    tokens: int


@dataclasses.dataclass(frozen=True)
class Reading:
    """The chunks a document page shows, and where they are in the document."""

    chunks: list[Chunk]
    start: int | None
    end: int | None
    chunk_count: int
    asked: tuple[int | None, int | None]
    """The range the URL asked for (None: the whole document)."""
    asked_tokens: int
    """Tokens of the asked range: more than the budget means the page shows part of it."""
    outline: list[tuple[str, int, int, int]]
    """(title, first chunk, last chunk, tokens) of the sections kb.read_document returned when
    the range did not fit: the outline of a document without a stored one."""

    @property
    def partial(self) -> bool:
        return self.asked_tokens > READ_BUDGET


def _read(
    conn: psycopg.Connection[Any], document_id: str, start: int | None, end: int | None
) -> list[queries.ReadRow]:
    with conn.cursor(row_factory=class_row(queries.ReadRow)) as cur:
        params = {"id": document_id, "start": start, "end": end, "budget": READ_BUDGET}
        return cur.execute(queries.READ_DOCUMENT_RANGE, params).fetchall()


def read_range(
    conn: psycopg.Connection[Any],
    document_id: str,
    start: int | None = None,
    end: int | None = None,
) -> Reading:
    """The chunks ``start..end`` (chunk indexes, inclusive; None: the document's first / last)
    of a document, within :data:`READ_BUDGET` tokens: when the range does not fit, its first
    part that does (a window sized from the range's average chunk, halved until it fits)."""
    rows = _read(conn, document_id, start, end)
    first = rows[0] if rows else None
    if first is None or first.status in ("not_found", "empty"):
        count = first.chunk_count or 0 if first else 0
        return Reading([], None, None, count, (start, end), 0, [])
    count = first.chunk_count or 0
    asked_tokens = first.range_tokens or 0
    outline: list[tuple[str, int, int, int]] = []
    if first.status == "outline":
        outline = [
            (r.heading_path or "", r.chunk_index or 0, r.last_chunk_index or 0, r.token_count or 0)
            for r in rows
        ]
        low = start if start is not None else 0
        high = end if end is not None else count - 1
        span = max(1, high - low + 1)
        average = max(1.0, asked_tokens / span)
        window = max(1, min(span, int(READ_BUDGET / average)))
        while True:
            rows = _read(conn, document_id, low, low + window - 1)
            if not rows or rows[0].status != "outline" or window == 1:
                break
            window = max(1, window // 2)
        if rows and rows[0].status == "outline":  # one chunk over the budget: never in practice
            rows = []
    chunks = [
        Chunk(r.chunk_id or 0, r.chunk_index or 0, r.heading_path or "", r.content or "",
              r.token_count or 0)
        for r in rows
        if r.status == "chunks"
    ]  # fmt: skip
    return Reading(
        chunks,
        chunks[0].index if chunks else None,
        chunks[-1].index if chunks else None,
        count,
        (start, end),
        asked_tokens,
        outline,
    )


@dataclasses.dataclass(frozen=True)
class RelationGroup:
    direction: str
    """``out`` (this document → others) or ``in``."""
    relation_type: str
    items: list[dict[str, Any]]


def relation_groups(detail: dict[str, Any]) -> list[RelationGroup]:
    """kb.show_document's edges out and in, grouped by direction and relation type."""
    groups: list[RelationGroup] = []
    for direction, key in (("out", "edges_out"), ("in", "edges_in")):
        by_type: dict[str, list[dict[str, Any]]] = {}
        for edge in detail.get(key) or []:
            by_type.setdefault(str(edge.get("relation_type")), []).append(edge)
        for kind in sorted(by_type, key=lambda t: (t not in RELATION_TYPES, t)):
            groups.append(RelationGroup(direction, kind, by_type[kind]))
    return groups


# --- the graph ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GraphData:
    nodes: list[GraphNode]
    capped: bool
    start: str | None


def graph_nodes(
    conn: psycopg.Connection[Any],
    *,
    start: str | None,
    depth: int,
    relation_types: Sequence[str] | None,
    filters: dict[str, Any],
    cap: int = GRAPH_CAP,
) -> GraphData:
    """The documents kb.explore_graph walks to from ``start`` (1-3 hops), or its catalogue (the
    most connected first), at most ``cap``; ``capped`` when there were more."""
    nodes = explore(
        conn,
        start=start,
        depth=depth,
        relation_types=relation_types,
        filters=filters,
        limit=min(cap + 1, 500),
    )
    capped = len(nodes) > cap
    if capped:  # the edges of the dropped node are to be dropped too
        kept = nodes[:cap]
        ids = {n.document_id for n in kept}
        nodes = [
            dataclasses.replace(n, edges=[e for e in n.edges if e["target_id"] in ids])
            for n in kept
        ]
    return GraphData(nodes, capped, start)


# --- search ------------------------------------------------------------------------------------


def headlines(
    conn: psycopg.Connection[Any], query: str, texts: Sequence[str]
) -> list[list[tuple[str, bool]]]:
    """For each text, its best fragments as ``(piece, is_query_term)`` pieces (ts_headline
    with the query's lexemes, any of them), for the template to escape and mark."""
    if not texts:
        return []
    clean = [t.replace(MARK_START, "").replace(MARK_END, "") for t in texts]
    rows = conn.execute(
        queries.HEADLINES, {"query": query, "texts": clean, "options": HEADLINE_OPTIONS}
    ).fetchall()
    return [split_marks(str(row[1] or "")) for row in rows]


_MARKED = re.compile(f"{MARK_START}(.*?){MARK_END}", re.S)


def split_marks(text: str) -> list[tuple[str, bool]]:
    """``a \\ue000b\\ue001 c`` -> ``[("a ", False), ("b", True), (" c", False)]``."""
    pieces: list[tuple[str, bool]] = []
    at = 0
    for match in _MARKED.finditer(text):
        if match.start() > at:
            pieces.append((text[at : match.start()], False))
        pieces.append((match.group(1), True))
        at = match.end()
    if at < len(text):
        pieces.append((text[at:], False))
    return [(p.replace(MARK_START, "").replace(MARK_END, ""), m) for p, m in pieces]


# --- status ------------------------------------------------------------------------------------


def collections(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """kb.collection_list: the collections this session may read, with their counts."""
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(queries.COLLECTION_LIST).fetchall()


def kb_stats(conn: psycopg.Connection[Any], filters: dict[str, Any]) -> dict[str, Any]:
    """kb.stats within ``filters``, without the run log (:func:`ingest_activity` has it)."""
    row = conn.execute(queries.WEB_STATS, {"filters": json.dumps(filters)}).fetchone()
    return dict(row[0]) if row and row[0] else {}


def age(when: datetime.datetime | None, now: datetime.datetime | None = None) -> str:
    """``3 days ago``, ``5 minutes ago``: how long ago ``when`` was, roughly."""
    if when is None:
        return ""
    now = now or datetime.datetime.now(datetime.UTC)
    seconds = max(0, int((now - when).total_seconds()))
    for size, unit in ((86400 * 365, "year"), (86400 * 30, "month"), (86400, "day"),
                       (3600, "hour"), (60, "minute")):  # fmt: skip
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return "just now"


def open_failures(runs: Sequence[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """``(run, failure)`` of the sources the newest run over each set of paths could not
    ingest: a later run over the same paths settles an earlier one's failures."""
    seen: set[tuple[str, ...]] = set()
    found: list[tuple[Any, dict[str, Any]]] = []
    for run in runs:  # newest first
        if run.finished_at is None:
            continue
        paths = tuple(sorted(run.paths))
        if paths in seen:
            continue
        seen.add(paths)
        found.extend((run, failure) for failure in run.failures)
    return found
