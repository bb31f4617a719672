"""Operating the knowledge base (loader.ops): the run log, stats, staleness and removal,
embedding models, index care, roles and collections, and the doctor's checks."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from psycopg import sql

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

NEAR_MISSES = """
SELECT a.ord::integer AS ord, k.chunk_id
  FROM unnest(%s::text[]) WITH ORDINALITY AS a(query_text, ord)
 CROSS JOIN LATERAL kb.keyword_search(a.query_text, %s) AS k
 ORDER BY a.ord, k.rank
"""
"""The keyword retriever's best chunks (BM25) for each of a list of texts, by rank: where
``pgkb models tune`` finds its near-miss negatives."""

TRAINING_PASSAGES = """
SELECT chunk_id, document_id::text AS document_id, source_uri, title, heading_path, chunk_index,
       content
  FROM kb.training_passages(%s, %s)
"""


@dataclasses.dataclass(frozen=True)
class TrainingPassage:
    """A chunk as ``pgkb models tune`` reads it (``kb.training_passages``)."""

    chunk_id: int
    document_id: str
    source_uri: str
    title: str
    heading_path: str
    chunk_index: int
    content: str


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
REVOKE_READER = sql.SQL("REVOKE kb_reader FROM {}")
"""Format with ``sql.Identifier(role)``: ``pgkb db revoke ROLE`` (every collection)."""
MISSING_COLLECTIONS = """
SELECT c FROM unnest(%s::text[]) AS c
 WHERE NOT EXISTS (SELECT 1 FROM kb.collections k WHERE k.name = c)
"""
INSERT_COLLECTION_GRANT = """
INSERT INTO kb.collection_grants (role_name, collection, can_write) VALUES (%s, %s, %s)
ON CONFLICT (role_name, coalesce(collection, ''))
DO UPDATE SET can_write = kb.collection_grants.can_write OR EXCLUDED.can_write
"""
"""A role's grant of one collection (NULL: every collection), to read it, or to read and write
it (``can_write``); granting twice changes nothing, and a read grant never takes writing away."""
KB_ROLE_MEMBERSHIPS = """
SELECT coalesce(pg_has_role(current_user, to_regrole('kb_reader'), 'MEMBER'), false),
       coalesce(pg_has_role(current_user, to_regrole('kb_writer'), 'MEMBER'), false)
"""
"""Whether this role is a member of kb_reader and of kb_writer (false when a role is missing)."""
COLLECTION_GRANTS = """
SELECT g.role_name, g.collection, g.can_write, g.granted_at, r.oid IS NOT NULL AS role_exists,
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
MODEL_INDEX_MISSING = """
SELECT 'embeddings_hnsw_model_' || m.id AS index_name
  FROM kb.embedding_models m
 WHERE m.id = %s
   AND m.dims <= 2000
   AND NOT EXISTS (SELECT 1 FROM pg_class i
                    WHERE i.relname = 'embeddings_hnsw_model_' || m.id
                      AND i.relnamespace = 'kb'::regnamespace)
"""
"""The name of one model's HNSW index when it is missing (``MODELS_WITHOUT_INDEX`` for one
model), no row when it exists or the model has more than 2,000 dims."""
KEYWORD_BACKEND_STATUS = "SELECT kb.keyword_backend_status()"
"""jsonb {setting, backend, reason, available, loaded, installed, indexes, collections}."""
CREATE_PG_TEXTSEARCH = "CREATE EXTENSION IF NOT EXISTS pg_textsearch"
BUILD_KEYWORD_INDEXES = "SELECT kb.build_keyword_indexes()"
"""The missing bm25 index of each collection; returns how many were created."""
VECTOR_INDEX_STATUS = """
SELECT model, dims, is_active, index_name, m, ef_construction, ef_search, built_for, sized_by,
       built_at, tier_now
  FROM kb.vector_index_status()
"""


@dataclasses.dataclass(frozen=True)
class VectorIndexRow:
    model: str
    dims: int
    is_active: bool
    index_name: str | None
    m: int | None
    ef_construction: int | None
    ef_search: int | None
    built_for: int | None
    sized_by: str | None
    built_at: datetime.datetime | None
    tier_now: str | None


INDEXED_MODELS = "SELECT id FROM kb.embedding_models WHERE dims <= 2000 ORDER BY id"
RESIZE_MODEL_INDEX = "SELECT kb.resize_model_index(%s)"
"""model_id; jsonb {index, resized, embeddings, m, ef_construction, ef_search, previous}, or
NULL when the model has no index (kb.resize_model_index)."""
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
