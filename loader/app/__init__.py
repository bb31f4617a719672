"""pgkb's application core and its public Python API: one typed entry per use case.

A use case takes one checked request and returns one typed result::

    from loader.app import KnowledgeBase, SearchRequest, AskRequest
    from loader.settings import load_settings

    kb = KnowledgeBase(load_settings())
    result = kb.search(SearchRequest.of("how do I rotate the keys", limit=3))
    for hit in result.hits:
        print(hit.score, hit.title, hit.source_uri)
    answer = kb.ask(AskRequest.of("How do I rotate the keys?"))
    print(answer.answer, [c.source_uri for c in answer.citations])

The names below are stable: the reference lists them (docs/reference/python.md), and a test
checks that list against this module.
"""

from __future__ import annotations

from typing import Any

from loader.app.checks import (
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_LIMIT,
    MAX_LIST_LIMIT,
    MAX_NEIGHBOURS,
    MAX_QUERY_CHARS,
    MAX_READ_TOKENS,
    MAX_SEARCH_LIMIT,
    MIN_READ_TOKENS,
    BadRequest,
    Forbidden,
    NotFound,
    surrogate_path,
)
from loader.app.core import KnowledgeBase
from loader.app.requests import (
    AskRequest,
    DocumentsRequest,
    GraphRequest,
    JobsRequest,
    NeighboursRequest,
    ReadRequest,
    RemoveRequest,
    Scope,
    SearchOptions,
    SearchRequest,
    SubmitRequest,
)
from loader.app.results import (
    Answer,
    Catalogue,
    DocumentRead,
    GraphResult,
    Neighbour,
    Neighbours,
    SearchHit,
    SearchResult,
)
from loader.db.queries import JobState
from loader.graph.relations import RELATION_TYPES
from loader.search import MODES
from loader.settings import Settings, load_settings

__all__ = [
    "MAX_GRAPH_DEPTH",
    "MAX_GRAPH_LIMIT",
    "MAX_LIST_LIMIT",
    "MAX_NEIGHBOURS",
    "MAX_QUERY_CHARS",
    "MAX_READ_TOKENS",
    "MAX_SEARCH_LIMIT",
    "MIN_READ_TOKENS",
    "MODES",
    "RELATION_TYPES",
    "Answer",
    "AskRequest",
    "BadRequest",
    "Catalogue",
    "DocumentRead",
    "DocumentsRequest",
    "Forbidden",
    "GraphRequest",
    "GraphResult",
    "JobState",
    "JobsRequest",
    "KnowledgeBase",
    "Neighbour",
    "Neighbours",
    "NeighboursRequest",
    "NotFound",
    "ReadRequest",
    "RemoveRequest",
    "Scope",
    "SearchHit",
    "SearchOptions",
    "SearchRequest",
    "SearchResult",
    "SubmitRequest",
    "ask_agent",
    "surrogate_path",
]


def ask_agent(
    question: str, settings: Settings | None = None, *, category: str | None = None
) -> dict[str, Any]:
    """The reader agent for other programs: the distilled answer as ``pgkb ask --agent --json``
    prints it (``{"answer", "abstained", "citations": [...], "related_documents": [...]}``),
    over a connection of its own with ``settings`` (default: pgkb's configuration)."""
    kb = KnowledgeBase(settings or load_settings())
    return kb.ask(AskRequest.of(question, category=category, agent=True)).to_json()
