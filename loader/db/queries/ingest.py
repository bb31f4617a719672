"""Writing documents in: chunks and embeddings (COPY), the ingestion lock, the session's
scope, and the bulk loads that drop and build a model's HNSW index (loader.ingest)."""

from __future__ import annotations

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
SESSION_COLLECTION_SCOPE = "SELECT kb.collection_scope(NULL)"
"""The session's collections checked: kb.collection_scope raises PK030 for one that does not
exist or that the role may not read (the servers' --collection, at start)."""

ADVISORY_LOCK = "SELECT pg_advisory_lock(%s)"
TRY_ADVISORY_LOCK = "SELECT pg_try_advisory_lock(%s)"
ADVISORY_UNLOCK = "SELECT pg_advisory_unlock(%s)"

STORED_SHAS = "SELECT source_uri, content_sha FROM kb.documents WHERE collection = %s"
ANY_DOCUMENT = "SELECT EXISTS (SELECT 1 FROM kb.documents)"
"""Whether a knowledge base holds anything yet (the quickstart's first run or a later one)."""
SET_SESSION_KEYWORD_BACKEND = "SELECT set_config('pgkb.keyword_backend', %s, false)"
"""The session's keyword backend (auto, sql, pg_textsearch; kb.keyword_backend reads it): the
keyword_backend setting, on every connection pgkb opens."""
ENSURE_COLLECTION = "INSERT INTO kb.collections (name) VALUES (%s) ON CONFLICT (name) DO NOTHING"
"""An ingest into a collection creates it when it is new."""
FINISH_LOAD = "SELECT kb.finish_load(%s)"
"""After a load: the GIN pending list merged, the tables analyzed (all of them when the load
changed a tenth of the chunks or more, or NULL changed; the never-analyzed ones otherwise)."""

# --- bulk loads: the model's HNSW index is dropped and built after (loader.ingest.bulk_index) --

MODEL_EMBEDDING_COUNT = "SELECT count(*) FROM kb.embeddings WHERE model_id = %s"
DROP_MODEL_INDEX = "SELECT kb.drop_model_index(%s)"
"""model_id; returns jsonb {index, m, ef_construction} (m and ef_construction null when they were
sized from the corpus), or NULL when the model has no index."""
BUILD_MODEL_INDEX = "SELECT kb.build_model_index(%s, %s, %s)"
"""model_id, hnsw_m, hnsw_ef_construction (NULL = sized from the model's embeddings)."""
SOURCE_URIS_LIKE = (
    "SELECT source_uri FROM kb.documents WHERE source_uri LIKE %s AND collection = %s"
)
DELETE_DOCUMENTS = "DELETE FROM kb.documents WHERE source_uri = ANY(%s) AND collection = %s"

WEB_VALIDATORS = """
SELECT metadata->>'url', source_uri, metadata->>'http_etag', metadata->>'http_last_modified'
  FROM kb.documents
 WHERE collection = %s AND metadata ? 'url' AND source_uri LIKE 'http%%'
"""
"""Web pages stored in a collection: the URL fetched, its source_uri (the canonical URL) and the
validators the server sent (pgkb ingest URL asks with them: an unchanged page answers 304)."""
