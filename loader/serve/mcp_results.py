"""The results of ``pgkb mcp``'s tools (:mod:`loader.serve.mcp`), as pydantic models: the SDK
turns each into the tool's output schema and checks every result against it. A field's
description is what the calling agent reads about it."""

from __future__ import annotations

from pydantic import BaseModel, Field


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


class JobResult(BaseModel):
    """A document submitted or removed through the write queue (add_document,
    remove_document)."""

    id: str = Field(description="The job's id.")
    action: str = Field(description="put (add or replace) or remove.")
    collection: str
    source_uri: str
    title: str | None = None
    category: str | None = None
    state: str = Field(
        description="pending until a worker processes it, then ready or failed (see error)."
    )
    attempts: int
    error: str | None = None
    document_id: str | None = Field(None, description="The document's id, once ready.")
    chunks: int = 0
