"""The document graph: reading it (loader.graph.catalogue) and writing it during ingestion
(loader.graph.store, loader.graph.llm)."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

# --- the document graph: reading (loader.graph.catalogue) ---------------------------------------

FIND_DOCUMENTS = """
SELECT document_id::text AS document_id, source_uri
  FROM kb.find_documents(%(ref)s, %(filters)s::jsonb)
"""
"""By id, exact source_uri, or the end of a source_uri; more than one row: ambiguous."""


@dataclasses.dataclass(frozen=True)
class DocumentRef:
    document_id: str
    source_uri: str


LIST_DOCUMENTS = """
SELECT document_id::text AS id, title, source_uri, category, doc_type, summary, key_entities,
       chunk_count AS chunks, edges_out, edges_in, updated_at
  FROM kb.document_list(filters => %(filters)s::jsonb, max_results => %(limit)s)
"""


@dataclasses.dataclass(frozen=True)
class DocumentListRow:
    id: str
    title: str
    source_uri: str
    category: str | None
    doc_type: str
    summary: str | None
    key_entities: list[str]
    chunks: int
    edges_out: int
    edges_in: int
    updated_at: datetime.datetime


SHOW_DOCUMENT = """
SELECT id::text AS id, title, source_uri, category, doc_type, summary, key_entities, toc,
       metadata_origin, metadata, created_at, updated_at, chunks, edges_out, edges_in,
       unresolved_links
  FROM kb.show_document(%s)
"""


@dataclasses.dataclass(frozen=True)
class DocumentDetailRow:
    id: str
    title: str
    source_uri: str
    category: str | None
    doc_type: str
    summary: str | None
    key_entities: list[str]
    toc: list[dict[str, Any]]
    metadata_origin: str | None
    metadata: dict[str, Any]
    created_at: datetime.datetime
    updated_at: datetime.datetime
    chunks: int
    edges_out: list[dict[str, Any]]
    edges_in: list[dict[str, Any]]
    unresolved_links: list[dict[str, Any]]


EXPLORE_GRAPH = """
SELECT document_id::text AS document_id, title, source_uri, category, doc_type, summary,
       key_entities, distance, path, edges
  FROM kb.explore_graph(start_document => %(start)s, query_text => %(query)s,
                        max_depth => %(depth)s, relation_types => %(types)s,
                        filters => %(filters)s::jsonb, document_ids => %(ids)s::uuid[],
                        max_results => %(limit)s)
"""


# one hop from each of several documents in one round trip, in kb.explore_graph's order per start
GRAPH_NEIGHBOURS = """
SELECT s.start_id, g.document_id, g.title, g.source_uri,
       g.path -> -1 ->> 'relation_type' AS relation_type
  FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS s(start_id, n),
       LATERAL kb.explore_graph(start_document => s.start_id, max_depth => 1,
                                filters => %(filters)s::jsonb, max_results => %(limit)s)
               WITH ORDINALITY AS g
 WHERE jsonb_array_length(g.path) > 0
 ORDER BY s.n, g.ordinality
"""


@dataclasses.dataclass(frozen=True)
class GraphNeighbourRow:
    start_id: uuid.UUID
    document_id: uuid.UUID
    title: str
    source_uri: str
    relation_type: str


@dataclasses.dataclass(frozen=True)
class GraphNodeRow:
    document_id: str
    title: str
    source_uri: str
    category: str | None
    doc_type: str
    summary: str | None
    key_entities: list[str] | None
    distance: int | None
    path: list[dict[str, Any]] | None
    edges: list[dict[str, Any]] | None


# --- the document graph: writing during ingestion (loader.graph.store, loader.graph.llm) --------

METADATA_SHA = "SELECT metadata_sha FROM kb.documents WHERE id = %s"
SET_DOCUMENT_METADATA = """
UPDATE kb.documents
   SET summary = %(summary)s, doc_type = %(doc_type)s, key_entities = %(key_entities)s,
       toc = %(toc)s::jsonb, metadata_origin = %(origin)s, metadata_sha = content_sha
 WHERE id = %(id)s
"""
SET_DOCUMENT_METADATA_IF_CURRENT = """
UPDATE kb.documents
   SET summary = %(summary)s, doc_type = %(doc_type)s, key_entities = %(key_entities)s,
       toc = %(toc)s::jsonb, metadata_origin = %(origin)s, metadata_sha = content_sha
 WHERE id = %(id)s AND content_sha = %(content_sha)s
"""
"""As :data:`SET_DOCUMENT_METADATA`, only while the document still has that content."""
DELETE_REINDEXED_RELATIONS = """
DELETE FROM kb.document_relations
 WHERE source_id = %(id)s OR (target_id = %(id)s AND origin = 'llm')
"""
"""A re-indexed document's edges: every edge out of it (rebuilt from its new text) and the
model-made edges into it (another document's chat call proposed them from its old text; they
come back only if a model proposes them again). Link and mention edges into it stay: they
are facts about the other documents' text."""
DELETE_DOCUMENT_LINKS = "DELETE FROM kb.document_links WHERE source_id = %s"
INSERT_DOCUMENT_LINKS = """
INSERT INTO kb.document_links (source_id, target_uri, href, anchor)
SELECT %(id)s, l.target_uri, l.href, l.anchor
  FROM unnest(%(targets)s::text[], %(hrefs)s::text[], %(anchors)s::text[])
       AS l(target_uri, href, anchor)
ON CONFLICT (source_id, target_uri) DO NOTHING
"""
LINK_EDGES_OUT = """
INSERT INTO kb.document_relations (source_id, target_id, relation_type, origin, evidence)
SELECT l.source_id, d.id, 'references', 'link', nullif(l.anchor, '')
  FROM kb.document_links l
  JOIN kb.documents s ON s.id = l.source_id
  JOIN kb.documents d ON d.source_uri = l.target_uri
 WHERE l.source_id = %(id)s AND d.id <> l.source_id
   AND (%(across)s OR d.collection = s.collection)
ON CONFLICT (source_id, target_id, relation_type) DO NOTHING
"""
"""The document's links to ingested documents become ``references`` edges (within its
collection unless ``across``)."""
LINK_EDGES_IN = """
INSERT INTO kb.document_relations (source_id, target_id, relation_type, origin, evidence)
SELECT l.source_id, %(id)s, 'references', 'link', nullif(l.anchor, '')
  FROM kb.document_links l
  JOIN kb.documents s ON s.id = l.source_id
 WHERE l.target_uri = %(uri)s AND l.source_id <> %(id)s
   AND (%(across)s OR s.collection = (SELECT t.collection FROM kb.documents t WHERE t.id = %(id)s))
ON CONFLICT (source_id, target_id, relation_type) DO NOTHING
"""
"""Other documents' links to this one (perhaps kept from before it arrived) become edges."""
DOCUMENT_NAMES = """
SELECT id::text AS document_id, title, source_uri FROM kb.documents
 WHERE %(collection)s::text IS NULL OR collection = %(collection)s
"""
"""The documents a mention may point to: those of the run's collection (NULL: every one)."""


@dataclasses.dataclass(frozen=True)
class DocumentNameRow:
    document_id: str
    title: str
    source_uri: str


CHUNK_TEXTS = "SELECT content FROM kb.chunks WHERE document_id = %s ORDER BY chunk_index LIMIT %s"
MENTION_CANDIDATES = """
SELECT DISTINCT c.document_id::text
  FROM kb.chunks c
  JOIN kb.documents d ON d.id = c.document_id
 WHERE c.tsv @@ phraseto_tsquery('english', %(phrase)s)
   AND c.document_id <> ALL(%(exclude)s::uuid[])
   AND (%(collection)s::text IS NULL OR d.collection = %(collection)s)
 LIMIT 500
"""
"""Documents (outside ``exclude``) whose chunks hold the phrase: the GIN index narrows."""
INSERT_RELATION = """
INSERT INTO kb.document_relations
       (source_id, target_id, relation_type, origin, evidence, confidence)
SELECT %(source)s, %(target)s, %(type)s, %(origin)s, %(evidence)s, %(confidence)s
 WHERE EXISTS (SELECT 1 FROM kb.documents WHERE id = %(source)s)
   AND EXISTS (SELECT 1 FROM kb.documents WHERE id = %(target)s)
ON CONFLICT (source_id, target_id, relation_type) DO NOTHING
"""
"""One edge, only if both ends still exist; a duplicate is ignored."""
DOCUMENT_FOR_METADATA = """
SELECT d.title, d.source_uri, d.content_sha, d.summary, d.key_entities, d.toc,
       (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer AS chunk_count
  FROM kb.documents d WHERE d.id = %s
"""


@dataclasses.dataclass(frozen=True)
class DocumentForMetadataRow:
    title: str
    source_uri: str
    content_sha: str
    summary: str | None
    key_entities: list[str] | None
    toc: list[dict[str, Any]] | None
    chunk_count: int


FIRST_CHUNKS = """
SELECT chunk_index, heading_path, content FROM kb.chunks
 WHERE document_id = %s ORDER BY chunk_index LIMIT 40
"""


@dataclasses.dataclass(frozen=True)
class ChunkTextRow:
    chunk_index: int
    heading_path: str
    content: str


DOCUMENT_PROFILES = """
SELECT id::text AS document_id, title, coalesce(summary, '') AS summary, key_entities
  FROM kb.documents
 WHERE %(collection)s::text IS NULL OR collection = %(collection)s
"""


@dataclasses.dataclass(frozen=True)
class DocumentProfileRow:
    document_id: str
    title: str
    summary: str
    key_entities: list[str] | None


DELETE_LLM_RELATIONS = "DELETE FROM kb.document_relations WHERE source_id = %s AND origin = 'llm'"
