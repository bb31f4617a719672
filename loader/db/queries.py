"""Every SQL statement the Python side sends, by name, in one place (like procrastinate's
``sql/queries.sql``); the rows that come back are typed (``psycopg.rows.class_row`` into the
frozen dataclasses below).

Rules: values are always bound parameters (``%(name)s`` or ``%s``), never formatted into the
text; identifiers go through ``psycopg.sql`` (only ``CREATE DATABASE`` and ``DROP DATABASE``
need one, see :data:`CREATE_DATABASE`). Retrieval and data logic belong in SQL functions
(``sql_functions/``), so most statements here are one-line calls of a ``kb.`` function. The
Alembic migrations and ``loader.migration_ops`` (frozen with them) carry their own SQL, as
migrations must.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from psycopg import sql

# --- schema state (loader.db.migrations, loader.db.status) ---------------------------------------

VERSION_TABLE_EXISTS = "SELECT to_regclass('kb.alembic_version') IS NOT NULL"
SCHEMA_REVISION = "SELECT version_num FROM kb.alembic_version"
SCHEMA_VERSION_CALLABLE = """
SELECT coalesce(has_function_privilege(p.oid, 'EXECUTE'), false)
  FROM (SELECT to_regprocedure('kb.schema_version()')::oid AS oid) AS p
"""
"""Can this role call ``kb.schema_version()`` (migration 0009; kb_reader has no table
privilege, so it cannot read ``kb.alembic_version`` itself)?"""
SCHEMA_VERSION = "SELECT kb.schema_version()"
PGVECTOR_AVAILABLE = "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
PGVECTOR_INSTALLED = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
SERVER_VERSION = "SHOW server_version"
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"
CREATE_DATABASE = sql.SQL("CREATE DATABASE {}")
"""Format with ``sql.Identifier(name)``."""
DROP_DATABASE = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
"""Format with ``sql.Identifier(name)`` (``pgkb quickstart --remove``: the demo database only)."""
CURRENT_DATABASE = "SELECT current_database()"

KB_COUNTS = """
SELECT (SELECT count(*) FROM kb.documents) AS documents,
       (SELECT count(*) FROM kb.chunks) AS chunks,
       (SELECT count(*) FROM kb.embeddings) AS embeddings,
       (SELECT name || ' (' || dims || ' dims)' FROM kb.embedding_models WHERE is_active)
           AS active_model
"""


@dataclasses.dataclass(frozen=True)
class KbCounts:
    documents: int
    chunks: int
    embeddings: int
    active_model: str | None


# --- embedding models (loader.providers.embeddings) ----------------------------------------------

ACTIVE_MODEL = "SELECT id, name, dims, provider FROM kb.active_model()"
REGISTER_MODEL = "SELECT kb.register_model(%s, %s, %s, %s::jsonb, %s, %s)"
"""name, dims, provider, config (JSON text), hnsw_m, hnsw_ef_construction (NULL = defaults)."""


@dataclasses.dataclass(frozen=True)
class ModelRow:
    id: int
    name: str
    dims: int
    provider: str


# --- search (loader.search): one statement per mode, the same columns ------------------------

HYBRID_SEARCH = """
SELECT chunk_id, document_id, title, source_uri, chunk_index, heading_path, content, score,
       vector_rank, vector_similarity, keyword_rank, keyword_score, category, metadata, token_count
  FROM kb.hybrid_search(
           query_text => %(query_text)s,
           query_embedding => %(query_embedding)s,
           match_count => %(match_count)s,
           vector_candidates => %(vector_candidates)s,
           keyword_candidates => %(keyword_candidates)s,
           rrf_k => %(rrf_k)s,
           vector_weight => %(vector_weight)s,
           keyword_weight => %(keyword_weight)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           min_similarity => %(min_similarity)s,
           model => %(model)s,
           keyword_ranking => %(keyword_ranking)s,
           max_per_document => %(max_per_document)s,
           exact_keyword_weight => %(exact_keyword_weight)s,
           ef_search => %(ef_search)s,
           keyword_confidence => %(keyword_confidence)s,
           lead_slot => %(lead_slot)s)
"""

VECTOR_SEARCH = """
WITH v AS MATERIALIZED (
    SELECT * FROM kb.vector_search(
           query_embedding => %(query_embedding)s,
           match_count => %(match_count)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           min_similarity => %(min_similarity)s,
           model => %(model)s,
           ef_search => %(ef_search)s))
SELECT v.chunk_id, v.document_id, v.title, v.source_uri, v.chunk_index, v.heading_path, v.content,
       v.similarity AS score, v.rank AS vector_rank, v.similarity AS vector_similarity,
       NULL::integer AS keyword_rank, NULL::double precision AS keyword_score,
       d.category, coalesce(d.metadata, '{}'::jsonb) AS metadata, d.token_count
  FROM v LEFT JOIN kb.chunk_details(ARRAY(SELECT v.chunk_id FROM v)) AS d
       ON d.chunk_id = v.chunk_id
 ORDER BY v.rank
"""

KEYWORD_SEARCH = """
WITH k AS MATERIALIZED (
    SELECT * FROM kb.keyword_search(
           query_text => %(query_text)s,
           match_count => %(match_count)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           keyword_ranking => %(keyword_ranking)s))
SELECT k.chunk_id, k.document_id, k.title, k.source_uri, k.chunk_index, k.heading_path, k.content,
       k.score, NULL::integer AS vector_rank, NULL::double precision AS vector_similarity,
       k.rank AS keyword_rank, k.score AS keyword_score,
       d.category, coalesce(d.metadata, '{}'::jsonb) AS metadata, d.token_count
  FROM k LEFT JOIN kb.chunk_details(ARRAY(SELECT k.chunk_id FROM k)) AS d
       ON d.chunk_id = k.chunk_id
 ORDER BY k.rank
"""
"""Both modes read the chunks' category, metadata and token count through kb.chunk_details, so
a kb_reader role (no table privilege) gets the same columns as hybrid mode."""

# --- the abstention gate (loader.answer.abstention) ----------------------------------------------

QUERY_TERMS = "SELECT lexeme, df, idf FROM kb.query_terms(%(query)s)"


@dataclasses.dataclass(frozen=True)
class QueryTerm:
    lexeme: str
    df: int
    idf: float


# The abstention gate's corpus checks, each a SECURITY DEFINER function (sql_functions/), so a
# kb_reader role, which has no table privilege, gets the same verdicts as the owner.
NAME_FOUND = "SELECT kb.name_found(%(phrase)s, %(regex)s)"
"""Does the exact name (whole words, any case) occur in some chunk (see kb.name_found)?"""
WORD_LEXEMES = "SELECT word, absent, lexemes FROM kb.word_lexemes(%(words)s::text[])"
NEAR_LEXEMES = "SELECT kb.near_lexemes(%(lexeme)s)"
"""Corpus lexemes that could be the word a misspelled one meant (the caller computes the edit
distance on this short list)."""
SQUASHED_LEXEME_FOUND = "SELECT kb.squashed_lexeme_found(%(squashed)s)"
CHUNK_LEXEMES = "SELECT chunk_id, lexemes FROM kb.chunk_lexemes(%(ids)s, %(lexemes)s::text[])"
ABSTENTION_RULE = "SELECT kb.abstention_rule()"
"""The calibrated rule stored in kb.settings (NULL when none)."""

# --- the corpus's similarity profile (loader.answer.abstention.profile) ----------------------

SIMILARITY_PROFILE = "SELECT kb.similarity_profile()"
PROFILE_STATE = "SELECT (SELECT name FROM kb.active_model()), chunk_count FROM kb.corpus_stats"
PSEUDO_QUERIES = "SELECT chunk_id, query FROM kb.pseudo_queries(%s)"
BEST_SIMILARITY = "SELECT max(similarity) FROM kb.vector_search(%s, 1)"
SAVE_SETTING = """
INSERT INTO kb.settings (key, value) VALUES (%s, %s)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()
"""

# --- context and related documents (loader.answer.context, loader.answer.tools) --------------

MERGE_NEIGHBOURS = """
SELECT m.chunk_start, m.chunk_end, m.content
  FROM kb.merge_neighbors(%(chunk_id)s, %(before)s, %(after)s) AS m
"""


@dataclasses.dataclass(frozen=True)
class MergedSpan:
    chunk_start: int
    chunk_end: int
    content: str


DOCUMENTS_BY_ID = """
SELECT document_id, title, source_uri, chunk_count
  FROM kb.document_list(filters => %(filters)s::jsonb, document_ids => %(ids)s::uuid[],
                        max_results => 10000)
"""
"""The documents the agent may name: with a category (the question's scope), only its own."""


@dataclasses.dataclass(frozen=True)
class DocumentRow:
    document_id: uuid.UUID
    title: str
    source_uri: str
    chunk_count: int


READ_DOCUMENT = "SELECT * FROM kb.read_document(%s::uuid, %s, %s, %s)"

NEIGHBOR_CHUNKS_IN_SCOPE = """
WITH n AS MATERIALIZED (
    SELECT * FROM kb.neighbor_chunks(%(chunk_id)s, %(before)s, %(after)s)
), d AS (
    SELECT document_id, title, source_uri
      FROM kb.document_list(filters => %(filters)s::jsonb,
                            document_ids => ARRAY(SELECT DISTINCT n.document_id FROM n))
)
SELECT n.chunk_id, n.document_id, d.title, d.source_uri, n.chunk_index, n.heading_path,
       n.content, n.is_hit
  FROM n JOIN d ON d.document_id = n.document_id
 ORDER BY n.chunk_index
"""
"""A chunk and its neighbours, only when its document is within the filters (the servers'
category scope), with the document's title and source."""
PING = "SELECT 1"
"""Rows vary with the status (chunks or outline): read with ``dict_row``."""

SOURCE_URIS = "SELECT source_uri FROM kb.documents"

# --- ingestion (loader.ingest.writer) -------------------------------------------------------------

REUSABLE_EMBEDDINGS = """
SELECT DISTINCT ON (c.content_sha) c.content_sha, e.embedding
  FROM kb.chunks c
  JOIN kb.embeddings e ON e.chunk_id = c.id AND e.model_id = %s
 WHERE c.content_sha = ANY(%s)
"""

UPSERT_DOCUMENT = """
INSERT INTO kb.documents AS d (source_uri, title, content_sha, category, metadata, collection)
VALUES (%s, %s, %s, %s, %s::jsonb, %s)
ON CONFLICT (collection, source_uri) DO UPDATE
   SET title = excluded.title,
       content_sha = excluded.content_sha,
       category = excluded.category,
       metadata = excluded.metadata,
       updated_at = now()
RETURNING d.id
"""

DELETE_CHUNKS = "DELETE FROM kb.chunks WHERE document_id = %s"
COPY_CHUNKS = (
    "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, token_count)"
    " FROM STDIN WITH (FORMAT BINARY)"
)
ROW_SECURITY_ACTIVE = (
    "SELECT row_security_active('kb.chunks') OR row_security_active('kb.embeddings')"
)
"""True for a writer that is not the tables' owner: row-level security applies to it, and
PostgreSQL refuses COPY into such a table, so its rows go through the staging tables below."""
CREATE_STAGING = """
CREATE TEMP TABLE IF NOT EXISTS pgkb_chunks_in (
    document_id uuid, chunk_index integer, heading_path text, content text, content_sha text,
    token_count integer) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS pgkb_embeddings_in (LIKE kb.embeddings) ON COMMIT DELETE ROWS
"""
COPY_CHUNKS_STAGED = (
    "COPY pg_temp.pgkb_chunks_in (document_id, chunk_index, heading_path, content, content_sha,"
    " token_count) FROM STDIN WITH (FORMAT BINARY)"
)
COPY_EMBEDDINGS_STAGED = (
    "COPY pg_temp.pgkb_embeddings_in (chunk_id, model_id, embedding) FROM STDIN"
    " WITH (FORMAT BINARY)"
)
INSERT_STAGED_CHUNKS = """
INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha, token_count)
SELECT document_id, chunk_index, heading_path, content, content_sha, token_count
  FROM pg_temp.pgkb_chunks_in;
TRUNCATE pg_temp.pgkb_chunks_in
"""
INSERT_STAGED_EMBEDDINGS = """
INSERT INTO kb.embeddings (chunk_id, model_id, embedding)
SELECT chunk_id, model_id, embedding FROM pg_temp.pgkb_embeddings_in;
TRUNCATE pg_temp.pgkb_embeddings_in
"""
CHUNK_IDS = "SELECT chunk_index, id FROM kb.chunks WHERE document_id = %s"
COPY_EMBEDDINGS = (
    "COPY kb.embeddings (chunk_id, model_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
)

INGEST_LOCK_HOLDER = """
SELECT l.pid, a.application_name FROM pg_locks l
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s
   AND l.objsubid = 1
"""
"""The backend holding the ingestion lock and its application_name (who it is)."""
SET_APPLICATION_NAME = "SELECT set_config('application_name', %s, false)"
"""An ingestion-lock holder names itself (pgkb ingest, pgkb models reembed) for the others."""
SESSION_READ_ONLY = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
SET_SESSION_COLLECTIONS = "SELECT set_config('pgkb.collections', %s, false)"
"""The session's collections (kb.collection_scope reads them): --collection on a read command
or a server."""
"""``ask`` and the agent only read: every transaction of their connection is read-only."""

ADVISORY_LOCK = "SELECT pg_advisory_lock(%s)"
TRY_ADVISORY_LOCK = "SELECT pg_try_advisory_lock(%s)"
ADVISORY_UNLOCK = "SELECT pg_advisory_unlock(%s)"

STORED_SHAS = "SELECT source_uri, content_sha FROM kb.documents WHERE collection = %s"
ENSURE_COLLECTION = "INSERT INTO kb.collections (name) VALUES (%s) ON CONFLICT (name) DO NOTHING"
"""An ingest into a collection creates it when it is new."""
ANALYZE_KB = "ANALYZE kb.documents, kb.chunks, kb.embeddings"

# --- bulk loads: the model's HNSW index is dropped and built after (loader.ingest.bulk_index) --

MODEL_EMBEDDING_COUNT = "SELECT count(*) FROM kb.embeddings WHERE model_id = %s"
DROP_MODEL_INDEX = "SELECT kb.drop_model_index(%s)"
"""model_id; returns jsonb {index, m, ef_construction}, or NULL when the model has no index."""
BUILD_MODEL_INDEX = "SELECT kb.build_model_index(%s, %s, %s)"
"""model_id, hnsw_m, hnsw_ef_construction (NULL = pgvector's defaults)."""
SOURCE_URIS_LIKE = (
    "SELECT source_uri FROM kb.documents WHERE source_uri LIKE %s AND collection = %s"
)
DELETE_DOCUMENTS = "DELETE FROM kb.documents WHERE source_uri = ANY(%s) AND collection = %s"

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

# --- operations (loader.ops): run log, stats, staleness and removal ---------------------------

INGEST_RUN_BEGIN = "SELECT kb.ingest_run_begin(%s)"
INGEST_RUN_END = "SELECT kb.ingest_run_end(%s, %s::jsonb)"
KB_STATS = "SELECT kb.stats(%s)"
"""One jsonb value (documents, models, categories, tables, indexes, last runs)."""

SEARCH_MEMORY = """
SELECT r.total, pg_size_bytes(current_setting('shared_buffers')),
       pg_size_pretty(r.total), pg_size_pretty(pg_size_bytes(current_setting('shared_buffers')))
  FROM (SELECT coalesce(sum(s.bytes), 0)::bigint AS total FROM kb.search_relations() s) r
"""
"""What searches read (kb.search_relations) against shared_buffers, in bytes and for people."""

INTERVAL_TEXT = "SELECT %s::interval::text"
STALE_DOCUMENTS = """
SELECT document_id, source_uri, title, category, updated_at, age::text AS age, chunks
  FROM kb.stale_documents(%s::interval, %s::text[])
"""


@dataclasses.dataclass(frozen=True)
class StaleDocument:
    document_id: uuid.UUID
    source_uri: str
    title: str
    category: str | None
    updated_at: datetime.datetime
    age: str
    chunks: int


REMOVE_DOCUMENTS = """
SELECT document_id, source_uri, title, chunks, embeddings, relations
  FROM kb.remove_documents(%s::text[], %s::uuid[], %s, %s, %s::text[])
"""


@dataclasses.dataclass(frozen=True)
class RemovedDocument:
    document_id: uuid.UUID
    source_uri: str
    title: str
    chunks: int
    embeddings: int
    relations: int


# --- operations: embedding models (loader.ops.models) -------------------------------------------

MODELS = "SELECT * FROM kb.models()"
MODEL_CONFIG = "SELECT config FROM kb.models() WHERE id = %s"
"""The stored config of registered model ``id`` (what pgkb needs to embed with it again)."""


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """A row of ``kb.models()``: a registered model with its coverage and index."""

    id: int
    name: str
    dims: int
    provider: str
    is_active: bool
    config: dict[str, Any]
    created_at: datetime.datetime
    embeddings: int
    missing: int
    wrong_dims: int
    index_name: str | None
    index_valid: bool | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["created_at"] = str(self.created_at)
        return data


ACTIVATE_MODEL = "SELECT kb.activate_model(%s, %s)"
DROP_MODEL = "SELECT kb.drop_model(%s, %s)"
CHUNKS_MISSING_EMBEDDING = """
SELECT chunk_id, title, heading_path, content, content_sha
  FROM kb.chunks_missing_embedding(%s, %s, %s)
"""


@dataclasses.dataclass(frozen=True)
class MissingChunk:
    chunk_id: int
    title: str
    heading_path: str
    content: str
    content_sha: str


STORE_EMBEDDING = """
INSERT INTO kb.embeddings (chunk_id, model_id, embedding)
SELECT c.id, %s, %s FROM kb.chunks c WHERE c.id = %s
    ON CONFLICT (chunk_id, model_id) DO NOTHING
"""

# --- operations: index care (loader.ops.maintenance; autocommit, outside a transaction) --------

KB_INDEXES = """
SELECT i.relname, NOT x.indisvalid
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
 WHERE i.relnamespace = 'kb'::regnamespace
 ORDER BY 1
"""
KB_TABLES = """
SELECT c.relname FROM pg_class c
 WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r' ORDER BY 1
"""
REINDEX_CONCURRENTLY = sql.SQL("REINDEX INDEX CONCURRENTLY {}")
"""Format with ``sql.Identifier("kb", index_name)``."""
VACUUM_ANALYZE = sql.SQL("VACUUM (ANALYZE) {}")
"""Format with ``sql.Identifier("kb", table_name)``."""

# --- operations: roles for services (loader.ops.roles) ------------------------------------------

ROLE_CAN_LOGIN = "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s"
VECTOR_SCHEMA = """
SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'vector'
"""
CHECK_STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"
CURRENT_DATABASE = "SELECT current_database()"
REVOKE_READER = sql.SQL("REVOKE kb_reader FROM {}")
"""Format with ``sql.Identifier(role)``: ``pgkb db revoke ROLE`` (every collection)."""
MISSING_COLLECTIONS = """
SELECT c FROM unnest(%s::text[]) AS c
 WHERE NOT EXISTS (SELECT 1 FROM kb.collections k WHERE k.name = c)
"""
INSERT_COLLECTION_GRANT = """
INSERT INTO kb.collection_grants (role_name, collection) VALUES (%s, %s) ON CONFLICT DO NOTHING
"""
"""A role's grant of one collection (NULL: every collection); granting twice changes nothing."""
KB_ROLE_MEMBERSHIPS = """
SELECT coalesce(pg_has_role(current_user, to_regrole('kb_reader'), 'MEMBER'), false),
       coalesce(pg_has_role(current_user, to_regrole('kb_writer'), 'MEMBER'), false)
"""
"""Whether this role is a member of kb_reader and of kb_writer (false when a role is missing)."""
COLLECTION_GRANTS = """
SELECT g.role_name, g.collection, g.granted_at, r.oid IS NOT NULL AS role_exists,
       coalesce(pg_has_role(r.oid, 'kb_reader', 'MEMBER'), false) AS reader
  FROM kb.collection_grants g
  LEFT JOIN pg_roles r ON r.rolname = g.role_name
 WHERE %(role)s::text IS NULL OR g.role_name = %(role)s
 ORDER BY g.role_name, g.collection NULLS FIRST
"""
DELETE_COLLECTION_GRANTS = """
DELETE FROM kb.collection_grants
 WHERE role_name = %(role)s
   AND (%(collections)s::text[] IS NULL OR collection = ANY (%(collections)s::text[]))
RETURNING collection
"""
"""A role's grants: the named collections, or (collections NULL) all of them."""
COLLECTION_LIST = """
SELECT name, description, created_at, documents, chunks FROM kb.collection_list()
"""
CREATE_COLLECTION = """
INSERT INTO kb.collections (name, description) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING
"""
DESCRIBE_COLLECTION = "UPDATE kb.collections SET description = %s WHERE name = %s"
DROP_COLLECTION_DOCUMENTS = "DELETE FROM kb.documents WHERE collection = %s"
DROP_COLLECTION = "DELETE FROM kb.collections WHERE name = %s"
GRANT_READER = sql.SQL("GRANT kb_reader TO {}")
GRANT_WRITER = sql.SQL("GRANT kb_writer TO {}")
"""Format both with ``sql.Identifier(role)``."""
ROLE_SEARCH_PATH = sql.SQL("ALTER ROLE {} IN DATABASE {} SET search_path = {}")
"""Format with the role and database (identifiers) and the schemas (identifiers joined by ", ")."""
ROLE_STATEMENT_TIMEOUT = sql.SQL("ALTER ROLE {} IN DATABASE {} SET statement_timeout = {}")
"""Format with the role and database (identifiers) and the timeout (``sql.Literal``)."""

# --- operations: pgkb db doctor (loader.ops.doctor) ---------------------------------------------

KB_FUNCTION_DEFINITIONS = """
SELECT p.proname, pg_get_functiondef(p.oid)
  FROM pg_proc p
 WHERE p.pronamespace = 'kb'::regnamespace
 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""
NO_FUNCTION_BODY_CHECKS = "SET LOCAL check_function_bodies = off"
INVALID_KB_INDEXES = """
SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
 WHERE i.relnamespace = 'kb'::regnamespace AND NOT x.indisvalid ORDER BY 1
"""
MODELS_WITHOUT_INDEX = """
SELECT m.id, m.name, 'embeddings_hnsw_model_' || m.id AS index_name
  FROM kb.embedding_models m
 WHERE m.dims <= 2000
   AND NOT EXISTS (SELECT 1 FROM pg_class i
                    WHERE i.relname = 'embeddings_hnsw_model_' || m.id
                      AND i.relnamespace = 'kb'::regnamespace)
 ORDER BY m.id
"""
"""Models (up to 2,000 dims, the most pgvector indexes) whose partial HNSW index is missing: a
bulk load dropped it and was killed before building it again (loader.ingest.bulk_index)."""
KB_ROLES = "SELECT rolname FROM pg_roles WHERE rolname IN ('kb_reader', 'kb_writer')"
# What the documentation's "Roles and grants" promises, one (check, have, want) row per promise. The
# function lists come from the grants written in sql_functions/ (loader.ops.doctor reads them):
# %(reader)s the functions granted to kb_reader, %(restricted)s those revoked from PUBLIC and not
# granted to kb_reader, %(writer)s those granted to kb_writer.
ROLE_PRIVILEGES = """
SELECT 'kb_reader may call kb.' || p.proname AS what,
       has_function_privilege('kb_reader', p.oid, 'EXECUTE') AS have, true AS want
  FROM pg_proc p
 WHERE p.pronamespace = 'kb'::regnamespace AND p.proname = ANY(%(reader)s::text[])
UNION ALL
SELECT 'kb_reader may not read kb tables (SELECT kb.' || c.relname || ')',
       has_table_privilege('kb_reader', c.oid, 'SELECT, INSERT, UPDATE, DELETE'), false
  FROM pg_class c WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'
UNION ALL
SELECT 'kb_reader may not call maintenance function kb.' || p.proname,
       has_function_privilege('kb_reader', p.oid, 'EXECUTE'), false
  FROM pg_proc p
 WHERE p.pronamespace = 'kb'::regnamespace AND p.proname = ANY(%(restricted)s::text[])
UNION ALL
SELECT 'kb_writer may write kb.documents',
       has_table_privilege('kb_writer', 'kb.documents', 'INSERT, UPDATE, DELETE'), true
UNION ALL
SELECT 'kb_writer may call kb.' || p.proname,
       has_function_privilege('kb_writer', p.oid, 'EXECUTE'), true
  FROM pg_proc p
 WHERE p.pronamespace = 'kb'::regnamespace AND p.proname = ANY(%(writer)s::text[])
UNION ALL
SELECT 'PUBLIC may not call SECURITY DEFINER function kb.' || p.proname,
       EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'), false
  FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace AND p.prosecdef
"""


@dataclasses.dataclass(frozen=True)
class PrivilegeCheck:
    what: str
    have: bool
    want: bool


PUBLIC_MAY_CREATE = "SELECT has_schema_privilege('public', 'public', 'CREATE')"
DOCTOR_MODELS = "SELECT name, dims, is_active, missing, wrong_dims FROM kb.models()"


@dataclasses.dataclass(frozen=True)
class ModelCoverage:
    name: str
    dims: int
    is_active: bool
    missing: int
    wrong_dims: int
