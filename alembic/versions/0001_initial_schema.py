"""The kb schema: documents, chunks, per-model embeddings, keyword statistics, relations.

Revision ID: 0001
Revises:
"""

from alembic import op

from loader.migration_ops import run_sql, upgrade_functions

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA_UP = r"""
CREATE EXTENSION IF NOT EXISTS vector;

-- The read-only role for services and analysts: it may search, never write.
-- Created before the functions, whose files grant EXECUTE on the search functions to it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        CREATE ROLE kb_reader NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role kb_reader (no CREATEROLE privilege); create it and re-grant';
END
$$;

-- One row per vector space: vectors of different models (or dims) are never compared.
CREATE TABLE kb.embedding_models (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CHECK (btrim(name) <> ''),
    dims        integer NOT NULL CHECK (dims BETWEEN 1 AND 16000),
    provider    text NOT NULL,
    is_active   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, dims)
);
CREATE UNIQUE INDEX embedding_models_one_active ON kb.embedding_models (is_active) WHERE is_active;
COMMENT ON TABLE kb.embedding_models IS 'Embedding models (name + dims = one vector space); exactly one is active.';

CREATE TABLE kb.documents (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    source_uri   text NOT NULL UNIQUE CHECK (btrim(source_uri) <> ''),
    title        text NOT NULL,
    content_sha  text NOT NULL,
    category     text,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX documents_category_idx ON kb.documents (category);
CREATE INDEX documents_metadata_idx ON kb.documents USING gin (metadata jsonb_path_ops);
CREATE INDEX documents_updated_at_idx ON kb.documents (updated_at);
COMMENT ON TABLE kb.documents IS 'One row per source; source_uri is its identity for re-ingestion, content_sha skips unchanged sources.';

CREATE TABLE kb.chunks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id   uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    chunk_index   integer NOT NULL CHECK (chunk_index >= 0),
    heading_path  text NOT NULL DEFAULT '',
    content       text NOT NULL,
    content_sha   text NOT NULL,
    token_count   integer NOT NULL CHECK (token_count >= 0),
    tsv           tsvector GENERATED ALWAYS AS (
                      setweight(to_tsvector('english'::regconfig, heading_path), 'A')
                      || setweight(to_tsvector('english'::regconfig, content), 'D')) STORED,
    UNIQUE (document_id, chunk_index)
);
CREATE INDEX chunks_tsv_idx ON kb.chunks USING gin (tsv);
CREATE INDEX chunks_content_sha_idx ON kb.chunks (content_sha);
COMMENT ON TABLE kb.chunks IS 'Passages of a document in order (chunk_index); tsv indexes heading_path (weight A) and content (weight D).';
COMMENT ON COLUMN kb.chunks.content_sha IS 'sha256 of the text given to the embedding model; equal text reuses its embedding.';
COMMENT ON COLUMN kb.chunks.token_count IS 'Length of the chunk in tokens of the embedding model''s tokenizer.';

-- Untyped vector column + model_id + one partial HNSW expression index per model
-- (created by kb.register_model): pgvector's pattern for several vector spaces in one table.
CREATE TABLE kb.embeddings (
    chunk_id    bigint NOT NULL REFERENCES kb.chunks (id) ON DELETE CASCADE,
    model_id    integer NOT NULL REFERENCES kb.embedding_models (id) ON DELETE CASCADE,
    embedding   vector NOT NULL,
    PRIMARY KEY (chunk_id, model_id)
);
CREATE INDEX embeddings_model_idx ON kb.embeddings (model_id);
COMMENT ON TABLE kb.embeddings IS 'One vector per (chunk, model); searched through the model''s partial HNSW index embeddings_hnsw_model_<id>.';

-- Keyword statistics for BM25, maintained by the trigger kb.chunks_maintain_stats.
CREATE TABLE kb.term_stats (
    lexeme  text PRIMARY KEY,
    df      integer NOT NULL CHECK (df >= 0)
);
COMMENT ON TABLE kb.term_stats IS 'Chunk frequency of each lexeme (number of chunks containing it), kept current by a trigger on kb.chunks.';

CREATE TABLE kb.corpus_stats (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    chunk_count   bigint NOT NULL DEFAULT 0,
    total_lexemes bigint NOT NULL DEFAULT 0
);
INSERT INTO kb.corpus_stats DEFAULT VALUES;
COMMENT ON TABLE kb.corpus_stats IS 'Single row: number of chunks and the sum of their lengths in distinct lexemes (length(tsv)), for BM25''s IDF and average chunk length.';

-- Typed relations between documents (the document graph).
CREATE TABLE kb.document_relations (
    source_id      uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    target_id      uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    relation_type  text NOT NULL CHECK (relation_type IN
                       ('references', 'supersedes', 'supplements', 'contradicts', 'depicts')),
    confidence     real CHECK (confidence BETWEEN 0 AND 1),
    evidence       text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, target_id, relation_type),
    CHECK (source_id <> target_id)
);
CREATE INDEX document_relations_target_idx ON kb.document_relations (target_id);
COMMENT ON TABLE kb.document_relations IS 'Typed edges between documents: one per (source, target, type), no self-loops.';

-- Values pgkb derives and keeps with the data (e.g. calibrated abstention thresholds).
CREATE TABLE kb.settings (
    key         text PRIMARY KEY,
    value       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.settings IS 'Derived settings stored with the knowledge base (e.g. calibrated thresholds), by key.';
"""  # noqa: E501 (landed SQL, kept byte for byte)

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0001.sql
FUNCTIONS = (
    "activate_model",
    "active_model",
    "chunks_maintain_stats",
    "embeddings_check_dims",
    "hybrid_search",
    "keyword_search",
    "merge_neighbors",
    "neighbor_chunks",
    "read_document",
    "register_model",
    "search_filters",
    "search_query",
    "vector_search",
)

POST_UP = r"""
CREATE TRIGGER chunks_stats_insert AFTER INSERT ON kb.chunks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();
CREATE TRIGGER chunks_stats_delete AFTER DELETE ON kb.chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();
CREATE TRIGGER chunks_stats_update AFTER UPDATE ON kb.chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();
CREATE TRIGGER embeddings_check_dims BEFORE INSERT OR UPDATE ON kb.embeddings
    FOR EACH ROW EXECUTE FUNCTION kb.embeddings_check_dims();

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT USAGE ON SCHEMA kb TO kb_reader;
    END IF;
END
$$;
"""

SCHEMA_DOWN = r"""
DROP TABLE IF EXISTS kb.settings, kb.document_relations, kb.embeddings, kb.chunks,
    kb.documents, kb.embedding_models, kb.term_stats, kb.corpus_stats CASCADE;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'kb'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', f);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        REVOKE ALL ON SCHEMA kb FROM kb_reader;
    END IF;
END
$$;
"""


def upgrade() -> None:
    conn = op.get_bind()
    run_sql(conn, SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(conn, POST_UP)


def downgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_DOWN)
