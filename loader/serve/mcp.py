"""``pgkb mcp``: the knowledge base as Model Context Protocol tools (the official ``mcp`` SDK).

Six tools over one warm :class:`~loader.serve.service.KnowledgeService`: ``search``, ``ask``,
``read_document``, ``neighbor_chunks``, ``explore_graph``, ``list_documents``. Each has typed
arguments (the SDK turns them into the input schema and validates every call against it) and a
typed result (its output schema); results carry titles, ``source_uri``s, document and chunk ids,
so the calling agent can cite. A bad argument, a refused scope or an unreachable database is a
tool error (``isError``) with a message the agent can act on, never a crash of the server.
Tools are synchronous and run on the SDK's worker threads, so two clients (over HTTP) or two
calls in flight share the pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field

from loader.errors import PgkbError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
from loader.serve.service import (
    MAX_LIST_LIMIT,
    MAX_NEIGHBOURS,
    MAX_READ_TOKENS,
    MAX_SEARCH_LIMIT,
    MIN_READ_TOKENS,
    KnowledgeService,
    parse_document_ids,
)

INSTRUCTIONS = (
    "pgkb: a knowledge base of documents. Start with list_documents to see what it holds, then "
    "search (or ask) and cite results by their title and source_uri. Use read_document to read "
    "a document or a chunk range, neighbor_chunks for the text around a search hit, and "
    "explore_graph for documents related to one another."
)


# --- results (the tools' output schemas) --------------------------------------------------------


class Hit(BaseModel):
    chunk_id: int = Field(description="Id of the chunk (for neighbor_chunks).")
    document_id: str
    title: str
    source_uri: str = Field(description="Where the document came from: cite it.")
    chunk_index: int = Field(description="Position of the chunk in its document, from 0.")
    heading_path: str
    content: str
    score: float
    vector_similarity: float | None = None
    keyword_score: float | None = None
    category: str | None = None


class SearchResult(BaseModel):
    query: str
    mode: str
    results: list[Hit]


class Citation(BaseModel):
    title: str
    source_uri: str
    document_id: str
    chunk_index: int
    chunk_end: int | None = None
    content: str
    score: float | None = None


class Related(BaseModel):
    document_id: str
    title: str
    source_uri: str
    relation: str


class AskResult(BaseModel):
    question: str
    answer: str
    abstained: bool = Field(description="True: the knowledge base does not answer this.")
    mode: str = Field(description="model, extractive (no chat model), fallback or abstained.")
    citations: list[Citation]
    related_documents: list[Related]
    notes: list[str] = []
    hint: str | None = None


class Chunk(BaseModel):
    chunk_id: int | None = None
    chunk_index: int
    heading_path: str
    content: str


class ReadResult(BaseModel):
    document_id: str
    title: str
    source_uri: str
    chunk_count: int
    status: str = Field(
        description="chunks (the text is in chunks), outline (too long: ask for a range), or empty."
    )
    chunks: list[Chunk] = []
    outline: list[str] = Field(
        default=[], description="'first-last: heading (tokens)' lines, when status is outline."
    )
    message: str | None = None
    notes: list[str] = []


class NeighborChunk(BaseModel):
    chunk_id: int
    chunk_index: int
    heading_path: str
    content: str
    is_hit: bool = Field(description="True for the chunk asked for.")


class NeighborsResult(BaseModel):
    document_id: str
    title: str
    source_uri: str
    chunks: list[NeighborChunk]


class GraphDocument(BaseModel):
    document_id: str
    title: str
    source_uri: str
    doc_type: str
    summary: str
    key_entities: list[str]
    distance: int | None = None
    path: list[str] = []
    edges: list[str] = []


class GraphResult(BaseModel):
    documents: list[GraphDocument]
    notes: list[str] = []


class CatalogueEntry(BaseModel):
    document_id: str
    title: str
    source_uri: str
    category: str | None
    doc_type: str
    summary: str | None
    key_entities: list[str]
    chunks: int
    edges_out: int
    edges_in: int
    updated_at: str


class Catalogue(BaseModel):
    documents: list[CatalogueEntry]
    count: int
    truncated: bool = Field(description="True when more documents exist than limit allowed.")


# --- the server -------------------------------------------------------------------------------

Category = Annotated[
    str | None,
    Field(
        description="Only documents of this category. A server started with --category allows "
        "only its own."
    ),
]
Collections = Annotated[
    list[str] | None,
    Field(
        description="Only these collections (knowledge bases); default: every one this server "
        "may read.",
        max_length=100,
    ),
]


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a service call; its refusals and failures become the tool's error message."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return fn(*args, **kwargs)
    except PgkbError as exc:
        raise ToolError(str(exc)) from None


def build_server(service: KnowledgeService) -> MCPServer[Any]:
    """The MCP server with pgkb's six tools bound to ``service``."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    scope = f" Scoped to category {service.category!r}." if service.category else ""
    served = service.settings.collection_names()
    if served:
        scope += f" Serves the collections {', '.join(served)}."
    server: MCPServer[Any] = MCPServer(name="pgkb", instructions=INSTRUCTIONS + scope)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only)
    def search(
        query: Annotated[str, Field(description="What to look for, in words or a question.")],
        mode: Annotated[
            Literal["hybrid", "vector", "keyword"],
            Field(description="hybrid (meaning + keywords, best), vector, or keyword."),
        ] = "hybrid",
        limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 5,
        category: Category = None,
        collections: Collections = None,
        source: Annotated[
            str | None, Field(description="LIKE pattern on source_uri, e.g. '%/sql-%'.")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Documents whose metadata contains this.")
        ] = None,
        min_similarity: Annotated[float | None, Field(ge=-1, le=1)] = None,
        document_ids: Annotated[
            list[str] | None, Field(description="Search only these documents.", max_length=100)
        ] = None,
    ) -> SearchResult:
        """Search the knowledge base: the best chunks for the query, each with its document's
        title and source_uri (cite them), the chunk id and the chunk's text."""
        data = _call(
            service.search,
            query,
            mode=mode,
            limit=limit,
            category=category,
            source=source,
            metadata=metadata,
            min_similarity=min_similarity,
            document_ids=_call(parse_document_ids, document_ids),
            collections=collections,
        )
        return SearchResult.model_validate(data)

    @server.tool(annotations=read_only)
    def ask(
        question: Annotated[str, Field(description="The question, in natural language.")],
        category: Category = None,
        collections: Collections = None,
    ) -> AskResult:
        """Answer a question from the knowledge base with citations, or say it does not know
        (abstained). Without a chat model configured, the answer is the best passages, cited."""
        return AskResult.model_validate(
            _call(service.ask, question, category=category, collections=collections)
        )

    @server.tool(annotations=read_only)
    def read_document(
        document: Annotated[
            str,
            Field(
                description="The document: its id, its source_uri, or the end of its source_uri "
                "(e.g. 'sql-createindex.html')."
            ),
        ],
        chunk_start: Annotated[int | None, Field(ge=0)] = None,
        chunk_end: Annotated[int | None, Field(ge=0)] = None,
        max_tokens: Annotated[int, Field(ge=MIN_READ_TOKENS, le=MAX_READ_TOKENS)] = 4000,
        category: Category = None,
        collections: Collections = None,
    ) -> ReadResult:
        """Read a document's chunks in order: all of it, or chunks chunk_start..chunk_end
        (inclusive, from 0). When that exceeds max_tokens, returns the document's outline
        (sections with their chunk ranges) instead: then read a smaller range."""
        data = _call(
            service.read_document,
            document,
            chunk_start=chunk_start,
            chunk_end=chunk_end,
            max_tokens=max_tokens,
            category=category,
            collections=collections,
        )
        return ReadResult.model_validate(data)

    @server.tool(annotations=read_only)
    def neighbor_chunks(
        chunk_id: Annotated[int, Field(ge=1, description="A chunk_id from search results.")],
        before: Annotated[int, Field(ge=0, le=MAX_NEIGHBOURS)] = 1,
        after: Annotated[int, Field(ge=0, le=MAX_NEIGHBOURS)] = 1,
        category: Category = None,
        collections: Collections = None,
    ) -> NeighborsResult:
        """The text around a search hit: the chunk with up to `before` chunks preceding it and
        `after` following it in its document, in order."""
        data = _call(
            service.neighbor_chunks,
            chunk_id,
            before=before,
            after=after,
            category=category,
            collections=collections,
        )
        return NeighborsResult.model_validate(data)

    @server.tool(annotations=read_only)
    def explore_graph(
        document: Annotated[
            str | None, Field(description="Start from this document (id or source_uri).")
        ] = None,
        query: Annotated[str | None, Field(description="Documents matching these words.")] = None,
        depth: Annotated[int, Field(ge=1, le=3)] = 1,
        relation_types: Annotated[
            list[str] | None, Field(description="Follow only these relation types.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=25)] = 15,
        category: Category = None,
        collections: Collections = None,
    ) -> GraphResult:
        """Walk the document graph (links, mentions, typed relations). With document: the
        documents up to depth hops from it, each with its distance and path. With query: the
        documents matching it and their neighbours. With neither: the most connected
        documents. Each comes with its id, title, source_uri, type, summary and entities."""
        data = _call(
            service.explore_graph,
            document=document,
            query=query,
            depth=depth,
            relation_types=relation_types,
            limit=limit,
            category=category,
            collections=collections,
        )
        return GraphResult.model_validate(data)

    @server.tool(annotations=read_only)
    def list_documents(
        limit: Annotated[int, Field(ge=1, le=MAX_LIST_LIMIT)] = 200,
        category: Category = None,
        collections: Collections = None,
    ) -> Catalogue:
        """The catalogue of the knowledge base: every document's id, title, source_uri, type,
        summary, key entities and chunk count, by title. Load it at the start of a session to
        know what the knowledge base holds."""
        return Catalogue.model_validate(
            _call(service.list_documents, limit=limit, category=category, collections=collections)
        )

    return server


def run(
    service: KnowledgeService, *, http: bool = False, host: str = "127.0.0.1", port: int = 8765
) -> None:
    """Serve ``service`` over stdio (the default) or streamable HTTP at ``/mcp``."""
    server = build_server(service)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run("stdio")
