"""What the use cases of :class:`loader.app.core.KnowledgeBase` return, one typed value each,
with the one JSON form every adapter sends (``to_dict``): the servers' bodies, the MCP tools'
structured output, ``--json`` on the command line.

An answer is :class:`loader.answer.result.Answer` and a document read
:class:`loader.answer.reading.DocumentRead`, both re-exported here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from loader.answer.reading import DocumentRead
from loader.answer.result import Answer
from loader.search import SearchHit

__all__ = [
    "Answer",
    "Catalogue",
    "DocumentRead",
    "GraphResult",
    "Neighbour",
    "Neighbours",
    "SearchHit",
    "SearchResult",
]


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """The best chunks for a query, best first, and notes on how it was searched (a reranker
    that failed, quoted text no chunk holds)."""

    query: str
    mode: str
    hits: tuple[SearchHit, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "query": self.query,
            "mode": self.mode,
            "results": [hit.to_dict() for hit in self.hits],
        }
        if self.notes:
            data["notes"] = list(self.notes)
        return data


@dataclasses.dataclass(frozen=True)
class Neighbour:
    chunk_id: int
    chunk_index: int
    heading_path: str
    content: str
    is_hit: bool


@dataclasses.dataclass(frozen=True)
class Neighbours:
    """A chunk and the chunks around it in its document, in order."""

    document_id: str
    title: str
    source_uri: str
    chunks: tuple[Neighbour, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "title": self.title,
            "source_uri": self.source_uri,
            "chunks": [dataclasses.asdict(chunk) for chunk in self.chunks],
        }


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """Documents by title: id, title, source, type, summary, key entities and counts each;
    ``truncated`` when there were more than the limit."""

    documents: tuple[dict[str, Any], ...]
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents": list(self.documents),
            "count": len(self.documents),
            "truncated": self.truncated,
        }


@dataclasses.dataclass(frozen=True)
class GraphResult:
    """A walk of the document graph as the reader agent's ``explore_graph`` tool returns it
    (documents, their relations, notes), within a token budget."""

    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)
