"""The kb schema: documents, chunks, per-model embeddings, keyword statistics, relations.

Revision ID: 0001
Revises:
"""

from alembic import op

from loader.migration_ops import apply_functions, run_sql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA_UP = r"""
CREATE EXTENSION IF NOT EXISTS vector;

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
    total_length  bigint NOT NULL DEFAULT 0
);
INSERT INTO kb.corpus_stats DEFAULT VALUES;
COMMENT ON TABLE kb.corpus_stats IS 'Single row: number of chunks and total lexeme occurrences, for BM25''s IDF and average length.';

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
"""

# >>> functions (generated by `python -m loader.devtools.snapshot`; do not edit by hand)
FUNCTIONS: dict[str, str | None] = {
    'activate_model': r"""-- kb.activate_model(model_name text, model_dims integer) -> integer
--
-- Makes the registered model (model_name, model_dims) the active one, atomically: queries that
-- do not name a model use the active model's embeddings from the moment this commits. Used to
-- switch to a new model after all chunks were embedded with it beside the old one, and to switch
-- back. Returns the model id; raises when the model is not registered.
CREATE OR REPLACE FUNCTION kb.activate_model(model_name text, model_dims integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    target integer;
BEGIN
    SELECT m.id INTO target
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims
       FOR UPDATE;
    IF target IS NULL THEN
        RAISE EXCEPTION 'embedding model % (% dims) is not registered', model_name, model_dims
            USING ERRCODE = 'no_data_found', HINT = 'register it with kb.register_model first';
    END IF;
    UPDATE kb.embedding_models SET is_active = false WHERE is_active AND id <> target;
    UPDATE kb.embedding_models SET is_active = true WHERE id = target;
    RETURN target;
END;
$$;

COMMENT ON FUNCTION kb.activate_model(text, integer) IS
'Atomically makes a registered embedding model the active one (the one searches use by default).';
""",
    'active_model': r"""-- kb.active_model() -> (id integer, name text, dims integer, provider text)
--
-- The active embedding model: the one whose vectors searches compare a query with when they are
-- not given a model. Returns no row before any model is registered.
CREATE OR REPLACE FUNCTION kb.active_model()
RETURNS TABLE (id integer, name text, dims integer, provider text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = kb, public, pg_temp
AS $$
    SELECT m.id, m.name, m.dims, m.provider
      FROM kb.embedding_models m
     WHERE m.is_active;
$$;

COMMENT ON FUNCTION kb.active_model() IS
'The active embedding model (id, name, dims, provider); no row before one is registered.';
""",
    'chunks_maintain_stats': r"""-- kb.chunks_maintain_stats(): statement-level trigger keeping the keyword statistics current.
--
-- Fired AFTER INSERT, DELETE and UPDATE on kb.chunks with transition tables (new_rows, old_rows).
-- Maintains, in the same transaction as the change:
--   kb.term_stats(lexeme, df)   df = number of chunks whose tsv contains the lexeme;
--   kb.corpus_stats             chunk_count and total_length (sum of lexeme occurrences),
-- the corpus statistics a BM25 ranking needs (IDF and average chunk length). Lexemes are
-- upserted in sorted order so concurrent writers cannot deadlock on kb.term_stats.
-- Returns NULL (statement triggers return nothing).
CREATE OR REPLACE FUNCTION kb.chunks_maintain_stats()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    delta_count  bigint := 0;
    delta_length bigint := 0;
    n            bigint;
    len          bigint;
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(kb.tsv_length(o.tsv)), 0)
          INTO n, len
          FROM old_rows o;
        delta_count := delta_count - n;
        delta_length := delta_length - len;

        UPDATE kb.term_stats t
           SET df = t.df - d.df
          FROM (SELECT lex.lexeme, count(*) AS df
                  FROM old_rows o, unnest(o.tsv) AS lex
                 GROUP BY lex.lexeme) d
         WHERE t.lexeme = d.lexeme;
        DELETE FROM kb.term_stats WHERE df <= 0;
    END IF;

    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(kb.tsv_length(nr.tsv)), 0)
          INTO n, len
          FROM new_rows nr;
        delta_count := delta_count + n;
        delta_length := delta_length + len;

        INSERT INTO kb.term_stats AS t (lexeme, df)
        SELECT lex.lexeme, count(*)
          FROM new_rows nr, unnest(nr.tsv) AS lex
         GROUP BY lex.lexeme
         ORDER BY lex.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = t.df + excluded.df;
    END IF;

    IF delta_count <> 0 OR delta_length <> 0 THEN
        UPDATE kb.corpus_stats
           SET chunk_count = chunk_count + delta_count,
               total_length = total_length + delta_length;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION kb.chunks_maintain_stats() IS
'Trigger: keeps kb.term_stats (chunk frequency per lexeme) and kb.corpus_stats (chunk count, total lexeme occurrences) in step with kb.chunks, for BM25 ranking.';
""",
    'embeddings_check_dims': r"""-- kb.embeddings_check_dims(): row trigger on kb.embeddings (BEFORE INSERT OR UPDATE).
--
-- Refuses an embedding whose dimension differs from the dimension registered for its model in
-- kb.embedding_models, so that no vector can ever sit beside vectors of another shape in the
-- same model's space. Returns NEW when the dimensions agree; raises otherwise.
CREATE OR REPLACE FUNCTION kb.embeddings_check_dims()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    expected integer;
    model_name text;
BEGIN
    SELECT m.dims, m.name INTO expected, model_name
      FROM kb.embedding_models m
     WHERE m.id = NEW.model_id;
    IF expected IS NOT NULL AND vector_dims(NEW.embedding) <> expected THEN
        RAISE EXCEPTION 'embedding for chunk % has % dimensions, but model % (id %) has %',
            NEW.chunk_id, vector_dims(NEW.embedding), model_name, NEW.model_id, expected
            USING ERRCODE = 'data_exception',
                  HINT = 'embed with the registered model, or register the new model first';
    END IF;
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION kb.embeddings_check_dims() IS
'Trigger: rejects an embedding whose dimension differs from its model''s registered dims.';
""",
    'register_model': r"""-- kb.register_model(model_name text, model_dims integer, model_provider text) -> integer
--
-- Registers an embedding model (name + dimensions = one vector space) and returns its id.
-- Idempotent: an already registered (name, dims) returns the existing id. Creates the model's
-- partial HNSW cosine index on kb.embeddings,
--     ((embedding::vector(dims)) vector_cosine_ops) WHERE model_id = id,
-- (pgvector indexes at most 2,000 dimensions; larger models are searched exactly, with a NOTICE).
-- The first model registered becomes the active one (see kb.activate_model).
CREATE OR REPLACE FUNCTION kb.register_model(model_name text, model_dims integer, model_provider text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    model_id integer;
BEGIN
    IF model_name IS NULL OR btrim(model_name) = '' THEN
        RAISE EXCEPTION 'model name must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF model_dims IS NULL OR model_dims < 1 OR model_dims > 16000 THEN
        RAISE EXCEPTION 'model dims must be between 1 and 16000, got %', model_dims
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    INSERT INTO kb.embedding_models (name, dims, provider, is_active)
    VALUES (model_name, model_dims, coalesce(model_provider, 'unknown'),
            NOT EXISTS (SELECT 1 FROM kb.embedding_models WHERE is_active))
    ON CONFLICT (name, dims) DO NOTHING;

    SELECT m.id INTO model_id
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims;

    IF model_dims <= 2000 THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON kb.embeddings USING hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) WHERE model_id = %s',
            'embeddings_hnsw_model_' || model_id, model_dims, model_id);
    ELSE
        RAISE NOTICE 'model % has % dimensions; HNSW indexes at most 2000, searches will be exact',
            model_name, model_dims;
    END IF;
    RETURN model_id;
END;
$$;

COMMENT ON FUNCTION kb.register_model(text, integer, text) IS
'Registers an embedding model (name, dims, provider), creates its partial HNSW cosine index, returns its id; the first model becomes active.';
""",
    'tsv_length': r"""-- kb.tsv_length(tsv tsvector) -> integer
--
-- The length of a text as BM25 counts it: the number of lexeme occurrences (positions) in its
-- tsvector, not the number of distinct lexemes that length(tsvector) returns. A lexeme stored
-- without positions counts once.
CREATE OR REPLACE FUNCTION kb.tsv_length(tsv tsvector)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
STRICT
SET search_path = kb, public, pg_temp
AS $$
    SELECT coalesce(sum(coalesce(array_length(l.positions, 1), 1)), 0)::integer
      FROM unnest(tsv) AS l;
$$;

COMMENT ON FUNCTION kb.tsv_length(tsvector) IS
'Number of lexeme occurrences (positions) in a tsvector: the document length BM25 uses.';
""",
}
PREVIOUS: dict[str, str | None] = {
    'activate_model': None,
    'active_model': None,
    'chunks_maintain_stats': None,
    'embeddings_check_dims': None,
    'register_model': None,
    'tsv_length': None,
}
# <<< functions

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

-- The read-only role for services and analysts: it may search, never write.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        CREATE ROLE kb_reader NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role kb_reader (no CREATEROLE privilege); create it and re-grant';
END
$$;
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
    apply_functions(op, FUNCTIONS)
    run_sql(conn, POST_UP)


def downgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_DOWN)
