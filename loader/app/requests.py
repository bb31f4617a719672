"""What a caller may ask of the knowledge base, one frozen request per use case, checked once.

Every adapter (the command line, ``pgkb serve``'s JSON API and chat completions, ``pgkb mcp``,
the web interface, the LangChain and LlamaIndex integrations, a user's own Python) parses its
own input into one of these and hands it to :class:`loader.app.core.KnowledgeBase`. The checks
and the limits live here and in :mod:`loader.app.checks` only: a request that exists is valid
(its constructor raises :class:`~loader.app.checks.BadRequest` naming the field and what it
accepts), so the core and the layers below never check a caller's arguments again.

Use the ``of`` constructors from raw values (JSON, keyword arguments: each value's type is
checked too); the plain constructors take already-typed values and check them the same way.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from loader.answer.tools import ToolRefusal, relation_type_list
from loader.app.checks import (
    LIST_LIMIT,
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_LIMIT,
    MAX_LIST_LIMIT,
    MAX_NEIGHBOURS,
    MAX_READ_TOKENS,
    MAX_SEARCH_LIMIT,
    MIN_READ_TOKENS,
    READ_TOKENS,
    BadRequest,
    bounded_int,
    call_collections,
    parse_document_ids,
    text_argument,
)
from loader.errors import ConfigError
from loader.filters import SearchFilters, check_collection
from loader.search import MODES, Mode

MAX_DOCUMENT_IDS = 100
GRAPH_LIMIT = 15


def _optional_text(name: str, value: Any, limit: int = 1000) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():
        return None
    return text_argument(name, value, limit)


def _scope(
    category: Any = None,
    source: Any = None,
    metadata: Any = None,
    collections: Any = None,
) -> SearchFilters:
    """The filters of a call from raw values, each checked."""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise BadRequest('metadata must be a JSON object, e.g. {"team": "hr"}')
    categories: tuple[str, ...] = ()
    if isinstance(category, str):
        categories = (category.strip(),) if category.strip() else ()
    elif category is not None:
        if not isinstance(category, Sequence) or not all(isinstance(c, str) for c in category):
            raise BadRequest("category must be a category name")
        categories = tuple(c.strip() for c in category if c.strip())
    try:
        return SearchFilters(
            categories,
            dict(metadata) if metadata else {},
            _optional_text("source", source),
            call_collections(collections, ()),
        )
    except ConfigError as exc:
        raise BadRequest(exc.message, hint=exc.hint) from None


def single_category(filters: SearchFilters) -> str | None:
    """The one category ``filters`` ask for (None for none or several)."""
    return filters.category[0] if len(filters.category) == 1 else None


@dataclasses.dataclass(frozen=True)
class Scope:
    """Where a call looks: its filters (category, metadata, source pattern) and the collections
    it narrows to (none: every collection the server serves and the role may read)."""

    filters: SearchFilters = dataclasses.field(default_factory=SearchFilters)

    @property
    def collections(self) -> tuple[str, ...]:
        return self.filters.collections

    @property
    def category(self) -> str | None:
        """The one category asked for (None for none or several)."""
        return single_category(self.filters)

    @classmethod
    def of(cls, category: Any = None, collections: Any = None) -> Scope:
        return cls(_scope(category=category, collections=collections))


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How to search: ``mode`` (hybrid, vector, keyword), ``limit`` results (1 to 50; None: the
    ``match_count`` setting), within ``filters``, with a cosine floor ``min_similarity`` (None:
    the setting), only among ``document_ids`` when given, reranked when ``rerank`` (None: when a
    reranker is configured). A framework retriever keeps one and adds each query to it."""

    mode: Mode = "hybrid"
    limit: int | None = None
    filters: SearchFilters = dataclasses.field(default_factory=SearchFilters)
    min_similarity: float | None = None
    document_ids: tuple[str, ...] = ()
    rerank: bool | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadRequest(f"unknown mode {self.mode!r}; use one of: {', '.join(MODES)}")
        if self.limit is not None:
            bounded_int("limit", self.limit, 1, MAX_SEARCH_LIMIT, 0)
        if self.min_similarity is not None:
            value = self.min_similarity
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadRequest(f"min_similarity must be a number from -1 to 1, got {value!r}")
            if not -1.0 <= float(value) <= 1.0:
                raise BadRequest(f"min_similarity must be from -1 to 1, got {value}")
            object.__setattr__(self, "min_similarity", float(value))
        if isinstance(self.document_ids, str) or not isinstance(self.document_ids, Sequence):
            raise BadRequest("document_ids must be a list of document ids")
        if len(self.document_ids) > MAX_DOCUMENT_IDS:
            raise BadRequest(f"document_ids may name at most {MAX_DOCUMENT_IDS} documents")
        ids = parse_document_ids(list(self.document_ids)) or []
        object.__setattr__(self, "document_ids", tuple(ids))
        if self.rerank is not None and not isinstance(self.rerank, bool):
            raise BadRequest(f"rerank must be true or false, got {self.rerank!r}")
        if self.rerank and self.mode != "hybrid":
            raise BadRequest(f"rerank applies to hybrid search, not {self.mode}")

    @classmethod
    def of(
        cls,
        *,
        mode: Any = "hybrid",
        limit: Any = None,
        category: Any = None,
        source: Any = None,
        metadata: Any = None,
        collections: Any = None,
        min_similarity: Any = None,
        document_ids: Any = None,
        rerank: Any = None,
    ) -> SearchOptions:
        """Options from raw values (a JSON body, tool arguments, keyword arguments)."""
        if document_ids is not None and (
            isinstance(document_ids, str) or not isinstance(document_ids, Sequence)
        ):
            raise BadRequest("document_ids must be a list of document ids")
        return cls(
            mode=mode if mode is not None else "hybrid",
            limit=limit,
            filters=_scope(category, source, metadata, collections),
            min_similarity=min_similarity,
            document_ids=tuple(str(i) for i in document_ids or ()),
            rerank=rerank,
        )

    def replace(self, **changes: Any) -> SearchOptions:
        """These options with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def category(self) -> str | None:
        """The one category asked for (None for none or several)."""
        return single_category(self.filters)


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """The best chunks for ``query``, searched as ``options`` say."""

    query: str
    options: SearchOptions = SearchOptions()

    def __post_init__(self) -> None:
        object.__setattr__(self, "query", text_argument("query", self.query))
        if not isinstance(self.options, SearchOptions):
            raise BadRequest("options must be SearchOptions")

    @classmethod
    def of(cls, query: Any, **options: Any) -> SearchRequest:
        """A request from raw values: ``query`` and :meth:`SearchOptions.of`'s arguments."""
        return cls(query=query, options=SearchOptions.of(**options))


@dataclasses.dataclass(frozen=True)
class AskRequest:
    """A cited answer (or "I don't know") to ``question`` within ``filters``; ``agent``: the
    reader agent instead of the single-shot answer."""

    question: str
    filters: SearchFilters = dataclasses.field(default_factory=SearchFilters)
    agent: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "question", text_argument("question", self.question))
        if not isinstance(self.agent, bool):
            raise BadRequest(f"agent must be true or false, got {self.agent!r}")

    @classmethod
    def of(
        cls,
        question: Any,
        *,
        category: Any = None,
        source: Any = None,
        metadata: Any = None,
        collections: Any = None,
        agent: Any = False,
    ) -> AskRequest:
        return cls(
            question=question,
            filters=_scope(category, source, metadata, collections),
            agent=False if agent is None else agent,
        )

    @property
    def category(self) -> str | None:
        return single_category(self.filters)


@dataclasses.dataclass(frozen=True)
class ReadRequest:
    """A document (its id, its source, or the end of its source) or the chunk range
    ``chunk_start``..``chunk_end`` of it, within ``max_tokens`` (else its outline)."""

    document: str
    chunk_start: int | None = None
    chunk_end: int | None = None
    max_tokens: int = READ_TOKENS
    scope: Scope = Scope()

    def __post_init__(self) -> None:
        object.__setattr__(self, "document", text_argument("document", self.document, 2000))
        for name in ("chunk_start", "chunk_end"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BadRequest(f"{name} must be an integer, got {value!r}")
        bounded_int("max_tokens", self.max_tokens, MIN_READ_TOKENS, MAX_READ_TOKENS, 0)

    @classmethod
    def of(
        cls,
        document: Any,
        *,
        chunk_start: Any = None,
        chunk_end: Any = None,
        max_tokens: Any = None,
        category: Any = None,
        collections: Any = None,
    ) -> ReadRequest:
        return cls(
            document=document,
            chunk_start=chunk_start,
            chunk_end=chunk_end,
            max_tokens=READ_TOKENS if max_tokens is None else max_tokens,
            scope=Scope.of(category, collections),
        )


@dataclasses.dataclass(frozen=True)
class NeighboursRequest:
    """The chunk ``chunk_id`` with up to ``before`` and ``after`` chunks around it."""

    chunk_id: int
    before: int = 1
    after: int = 1
    scope: Scope = Scope()

    def __post_init__(self) -> None:
        bounded_int("chunk_id", self.chunk_id, 1, 2**63 - 1, 0)
        bounded_int("before", self.before, 0, MAX_NEIGHBOURS, 0)
        bounded_int("after", self.after, 0, MAX_NEIGHBOURS, 0)

    @classmethod
    def of(
        cls,
        chunk_id: Any,
        *,
        before: Any = None,
        after: Any = None,
        category: Any = None,
        collections: Any = None,
    ) -> NeighboursRequest:
        return cls(
            chunk_id=chunk_id,
            before=1 if before is None else before,
            after=1 if after is None else after,
            scope=Scope.of(category, collections),
        )


@dataclasses.dataclass(frozen=True)
class GraphRequest:
    """Documents around ``document`` (1 to 3 hops: ``depth``), matching ``query``, or the most
    connected ones; only ``relation_types`` when given; at most ``limit``."""

    document: str | None = None
    query: str | None = None
    depth: int | None = None
    relation_types: tuple[str, ...] | None = None
    limit: int = GRAPH_LIMIT
    scope: Scope = Scope()

    def __post_init__(self) -> None:
        if self.document is not None:
            object.__setattr__(self, "document", text_argument("document", self.document, 2000))
        if self.query is not None:
            object.__setattr__(self, "query", text_argument("query", self.query))
        if self.depth is not None:
            bounded_int("depth", self.depth, 1, MAX_GRAPH_DEPTH, 1)
        bounded_int("limit", self.limit, 1, MAX_GRAPH_LIMIT, 0)
        if self.relation_types is not None:
            try:
                types = relation_type_list(list(self.relation_types))
            except ToolRefusal as exc:
                raise BadRequest(str(exc)) from None
            object.__setattr__(self, "relation_types", tuple(types) if types else None)

    @classmethod
    def of(
        cls,
        *,
        document: Any = None,
        query: Any = None,
        depth: Any = None,
        relation_types: Any = None,
        limit: Any = None,
        category: Any = None,
        collections: Any = None,
    ) -> GraphRequest:
        if isinstance(relation_types, str):
            relation_types = [relation_types]
        if relation_types is not None and not isinstance(relation_types, Sequence):
            raise BadRequest("relation_types must be a list of relation types")
        return cls(
            document=document,
            query=query,
            depth=depth,
            relation_types=None if relation_types is None else tuple(relation_types),
            limit=GRAPH_LIMIT if limit is None else limit,
            scope=Scope.of(category, collections),
        )


@dataclasses.dataclass(frozen=True)
class DocumentsRequest:
    """The catalogue: at most ``limit`` documents (1 to 1,000), by title."""

    limit: int = LIST_LIMIT
    scope: Scope = Scope()

    def __post_init__(self) -> None:
        bounded_int("limit", self.limit, 1, MAX_LIST_LIMIT, 0)

    @classmethod
    def of(
        cls, *, limit: Any = None, category: Any = None, collections: Any = None
    ) -> DocumentsRequest:
        return cls(
            limit=LIST_LIMIT if limit is None else limit, scope=Scope.of(category, collections)
        )


def document_uuid(value: str) -> uuid.UUID:
    """``value`` as a UUID (a :class:`BadRequest` otherwise)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise BadRequest(f"id {value!r} is not a UUID") from None


MAX_SUBMIT_BYTES = 100 * 1024 * 1024
"""The largest document a call may submit (kb.enqueue_document's limit, too)."""


@dataclasses.dataclass(frozen=True)
class SubmitRequest:
    """Add or replace the document ``source_uri`` of ``collection``: its text ``content``
    (Markdown or plain text), or a file's bytes ``data`` of type ``mime_type``; ``title`` (None:
    its own), ``metadata`` (a JSON object), ``category``."""

    source_uri: str
    content: str | None = None
    data: bytes | None = None
    mime_type: str | None = None
    title: str | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    category: str | None = None
    collection: str = "default"

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_uri", text_argument("source_uri", self.source_uri, 2000))
        if (self.content is None) == (self.data is None):
            raise BadRequest(
                "give the document's text (content) or a file's bytes (data), not both"
            )
        if self.content is not None:
            object.__setattr__(
                self, "content", text_argument("content", self.content, MAX_SUBMIT_BYTES)
            )
        if self.data is not None:
            if not isinstance(self.data, bytes | bytearray) or not self.data:
                raise BadRequest("data must be the file's bytes, not empty")
            if len(self.data) > MAX_SUBMIT_BYTES:
                raise BadRequest(f"the file is {len(self.data)} bytes; at most {MAX_SUBMIT_BYTES}")
            object.__setattr__(self, "mime_type", text_argument("mime_type", self.mime_type, 200))
        if self.title is not None:
            object.__setattr__(self, "title", _optional_text("title", self.title, 1000))
        if not isinstance(self.metadata, Mapping):
            raise BadRequest('metadata must be a JSON object, e.g. {"team": "hr"}')
        object.__setattr__(self, "metadata", dict(self.metadata))
        if self.category is not None:
            object.__setattr__(self, "category", _optional_text("category", self.category, 200))
        object.__setattr__(self, "collection", _collection(self.collection))


@dataclasses.dataclass(frozen=True)
class RemoveRequest:
    """Remove the document ``source_uri`` of ``collection``."""

    source_uri: str
    collection: str = "default"

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_uri", text_argument("source_uri", self.source_uri, 2000))
        object.__setattr__(self, "collection", _collection(self.collection))


JOB_STATES = ("pending", "processing", "ready", "failed")


@dataclasses.dataclass(frozen=True)
class JobsRequest:
    """The submitted documents (newest first): only those in ``state`` when given, at most
    ``limit`` (1 to 1,000), or the one job ``job_id``."""

    state: str | None = None
    limit: int = 100
    job_id: str | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in JOB_STATES:
            raise BadRequest(f"state must be one of {', '.join(JOB_STATES)}, got {self.state!r}")
        bounded_int("limit", self.limit, 1, MAX_LIST_LIMIT, 0)
        if self.job_id is not None:
            object.__setattr__(self, "job_id", str(document_uuid(str(self.job_id))))


def _collection(value: Any) -> str:
    name = "default" if value is None else value
    try:
        return check_collection(name, where="collection")
    except ConfigError as exc:
        raise BadRequest(exc.message) from None
