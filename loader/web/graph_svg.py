"""The document graph as a picture: a layout computed in Python (networkx's force-directed
``spring_layout``, seeded so the same graph is drawn the same way), then SVG elements the
template writes out.

Nodes are coloured by document type and sized by degree (edges among the drawn documents);
edges are coloured by relation type, with an arrow at the target. Labels: every node's title
is in its tooltip; written beside the node for the start document and the most connected ones
(all of them up to :data:`ALL_LABELS` nodes), the others appear when the page's script zooms in.
The positions of the last 64 graphs drawn are kept, so a graph seen again is not laid out again.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

from loader.graph.catalogue import GraphNode

WIDTH, HEIGHT, MARGIN = 1000.0, 680.0, 60.0
ALL_LABELS = 40
"""Up to this many nodes every label is written; above, the most connected :data:`LABELS`."""
LABELS = 25
LABEL_CHARS = 32

TYPE_COLOURS = {
    "policy": "#c0392b",
    "manual": "#2471a3",
    "technical_spec": "#7d3c98",
    "report": "#d68910",
    "reference": "#148f77",
    "general": "#707b7c",
}
RELATION_COLOURS = {
    "references": "#5d6d7e",
    "supersedes": "#c0392b",
    "supplements": "#27ae60",
    "contradicts": "#e67e22",
    "depicts": "#8e44ad",
}


@dataclasses.dataclass(frozen=True)
class Node:
    document_id: str
    title: str
    label: str
    source_uri: str
    doc_type: str
    colour: str
    x: float
    y: float
    r: float
    degree: int
    distance: int | None
    start: bool
    major: bool
    """Label written at every zoom (else only when zoomed in)."""


@dataclasses.dataclass(frozen=True)
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float
    relation_type: str
    origin: str
    colour: str
    source_title: str
    target_title: str


@dataclasses.dataclass(frozen=True)
class Picture:
    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float
    node_types: list[tuple[str, str]]
    """(type, colour) of the types drawn: the legend."""
    relation_types: list[tuple[str, str]]


def _short(title: str) -> str:
    flat = " ".join(title.split())
    return flat if len(flat) <= LABEL_CHARS else flat[: LABEL_CHARS - 1].rstrip() + "…"


@functools.lru_cache(maxsize=64)
def _positions(
    ids: tuple[str, ...], edges: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, tuple[float, float]], ...]:
    """Force-directed positions of ``ids`` joined by ``edges`` (networkx's spring_layout,
    seeded): the same graph gets the same picture, so it is kept for the next request (the
    64 last graphs drawn)."""
    import networkx as nx

    if len(ids) == 1:
        return ((ids[0], (0.0, 0.0)),)
    if not ids:
        return ()
    graph = nx.Graph()
    graph.add_nodes_from(ids)
    graph.add_edges_from(edges)
    k = 1.6 / math.sqrt(len(ids))  # a little more room than the default 1/sqrt(n)
    raw = nx.spring_layout(graph, k=k, seed=7, iterations=50)
    return tuple((key, (float(raw[key][0]), float(raw[key][1]))) for key in ids)


def layout(nodes: Sequence[GraphNode], start: str | None = None) -> Picture:
    """Positions, sizes and colours for ``nodes`` and the edges among them."""
    import networkx as nx

    ids = [n.document_id for n in nodes]
    present = set(ids)
    graph = nx.Graph()
    graph.add_nodes_from(ids)
    pairs: list[tuple[str, str, str, str]] = []
    for node in nodes:
        for edge in node.edges:
            target = str(edge.get("target_id"))
            if target in present and target != node.document_id:
                pairs.append((node.document_id, target, str(edge.get("relation_type")),
                               str(edge.get("origin") or "")))  # fmt: skip
                graph.add_edge(node.document_id, target)
    edge_key = tuple(sorted((a, b) if a < b else (b, a) for a, b, _, _ in pairs))
    positions = dict(_positions(tuple(ids), edge_key))
    xs = [p[0] for p in positions.values()] or [0.0]
    ys = [p[1] for p in positions.values()] or [0.0]
    span_x = (max(xs) - min(xs)) or 1.0
    span_y = (max(ys) - min(ys)) or 1.0

    def place(key: str) -> tuple[float, float]:
        x, y = positions[key]
        if len(positions) == 1:
            return WIDTH / 2, HEIGHT / 2
        return (
            MARGIN + (x - min(xs)) / span_x * (WIDTH - 2 * MARGIN),
            MARGIN + (y - min(ys)) / span_y * (HEIGHT - 2 * MARGIN),
        )

    degree = dict(graph.degree())
    by_degree = sorted(ids, key=lambda i: (-degree.get(i, 0), i))
    major = set(ids) if len(ids) <= ALL_LABELS else set(by_degree[:LABELS])
    if start:
        major.add(start)
    shrink = 1.0 if len(ids) <= 60 else 0.7
    drawn: list[Node] = []
    where: dict[str, Node] = {}
    for node in nodes:
        x, y = place(node.document_id)
        d = degree.get(node.document_id, 0)
        item = Node(
            document_id=node.document_id,
            title=node.title,
            label=_short(node.title),
            source_uri=node.source_uri,
            doc_type=node.doc_type,
            colour=TYPE_COLOURS.get(node.doc_type, TYPE_COLOURS["general"]),
            x=round(x, 1),
            y=round(y, 1),
            r=round(
                min(
                    22.0,
                    (5.0 + 2.2 * math.sqrt(d)) * shrink + (4 if node.document_id == start else 0),
                ),
                1,
            ),
            degree=d,
            distance=node.distance,
            start=node.document_id == start,
            major=node.document_id in major,
        )
        drawn.append(item)
        where[node.document_id] = item
    edges: list[Edge] = []
    for source, target, kind, origin in pairs:
        a, b = where[source], where[target]
        length = math.hypot(b.x - a.x, b.y - a.y) or 1.0
        # from the source's rim to the target's rim, so the arrow head is visible
        ux, uy = (b.x - a.x) / length, (b.y - a.y) / length
        edges.append(
            Edge(
                x1=round(a.x + ux * a.r, 1),
                y1=round(a.y + uy * a.r, 1),
                x2=round(b.x - ux * (b.r + 2), 1),
                y2=round(b.y - uy * (b.r + 2), 1),
                relation_type=kind,
                origin=origin,
                colour=RELATION_COLOURS.get(kind, "#5d6d7e"),
                source_title=a.title,
                target_title=b.title,
            )
        )
    drawn_types = {n.doc_type for n in drawn}
    edge_types = {e.relation_type for e in edges}
    node_types = [(t, c) for t, c in TYPE_COLOURS.items() if t in drawn_types]
    relation_types = [(t, c) for t, c in RELATION_COLOURS.items() if t in edge_types]
    return Picture(drawn, edges, WIDTH, HEIGHT, node_types, relation_types)
