"""Baseline of the release: migrations 0009 to 0036 folded into one

Revision ID: 0036
Revises: 0008

Migrations 0009-0036 were never released; at this release they are squashed into this one
revision, which keeps the id of the newest of them, so a database already at 0036 is at this
baseline unchanged. A database at 0009-0035 is refused by this pgkb (`pgkb db upgrade` names the
older pgkb that takes it to 0036 first): those revisions no longer exist.

From 0008, upgrade makes the schema changes 0009-0036 made by hand, in their order (term
postings, collections and their grants, per-collection keyword statistics, the HNSW index
record, the run log's failures), then applies each function's 0036 text once
(alembic/functions/<name>/0036.sql), then what calls the functions (row-level security
policies, triggers) and one statistics rebuild, which fills kb.term_postings as 0012 and 0033
did. Downgrade returns to 0008 exactly: each function's 0008 text from the store (or the
function dropped), the tables and columns added since dropped, and the statistics tables of
0008 rebuilt from the per-collection ones.
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0036"
down_revision = "0008"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0036.sql
FUNCTIONS = (
    "abstention_rule",
    "activate_model",
    "active_model",
    "build_keyword_indexes",
    "build_model_index",
    "cancel_overdue_queries",
    "chunk_details",
    "chunk_lexemes",
    "chunks_maintain_stats",
    "chunks_missing_embedding",
    "chunks_set_collection",
    "collection_list",
    "collection_readable",
    "collection_scope",
    "collections_keyword_index",
    "document_facets",
    "document_list",
    "document_page",
    "drop_model",
    "drop_model_index",
    "embeddings_check_dims",
    "explore_graph",
    "find_documents",
    "finish_load",
    "hnsw_ef_search",
    "hnsw_parameters",
    "hybrid_search",
    "ingest_activity",
    "ingest_run_end",
    "keyword_backend",
    "keyword_backend_status",
    "keyword_index_name",
    "keyword_search",
    "keyword_search_pg_textsearch",
    "name_found",
    "near_lexemes",
    "neighbor_chunks",
    "pseudo_queries",
    "query_terms",
    "read_document",
    "readable_collections",
    "rebuild_keyword_stats",
    "register_model",
    "remove_documents",
    "resize_model_index",
    "schema_version",
    "search_filters",
    "search_query",
    "search_relations",
    "show_document",
    "similarity_profile",
    "squashed_lexeme_found",
    "stale_documents",
    "stats",
    "table_rows",
    "term_df",
    "term_impacts",
    "training_passages",
    "vector_index_status",
    "vector_search",
    "word_lexemes",
)


# --- before the functions, in the order 0009-0036 ran them ---------------------------------------

# 0012: impact-ordered postings of common words (with 0033's threshold in the comment; filled
# by the rebuild at the end, which needs this revision's functions)
TERM_POSTINGS_UP = """
CREATE TABLE kb.term_postings (
    lexeme   text   NOT NULL,
    impact   real   NOT NULL,
    chunk_id bigint NOT NULL,
    PRIMARY KEY (lexeme, impact, chunk_id)
);
COMMENT ON TABLE kb.term_postings IS 'Impact-ordered postings of the lexemes held by more than 100 chunks (impact: kb.term_impacts), kept current by the statistics trigger on kb.chunks; kb.keyword_search reads a common word''s best chunks from it.';
-- the statistics trigger runs as the writer (pgkb db grant --write), like kb.term_stats
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.term_postings TO kb_writer;
"""  # noqa: E501

# 0015: collections and their grants
COLLECTIONS_UP = """
CREATE TABLE kb.collections (
    name        text        PRIMARY KEY
                            CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.collections IS 'The knowledge bases of this database: every document belongs to one (kb.documents.collection); readers are granted collections (kb.collection_grants).';
INSERT INTO kb.collections (name, description) VALUES ('default', 'Documents ingested without --collection');

ALTER TABLE kb.documents
    ADD COLUMN collection text NOT NULL DEFAULT 'default' REFERENCES kb.collections (name);
COMMENT ON COLUMN kb.documents.collection IS 'The collection (kb.collections) the document belongs to; source_uri is unique within it.';
ALTER TABLE kb.documents DROP CONSTRAINT documents_source_uri_key;
ALTER TABLE kb.documents
    ADD CONSTRAINT documents_collection_source_uri_key UNIQUE (collection, source_uri);
CREATE INDEX documents_source_uri_idx ON kb.documents (source_uri);
COMMENT ON TABLE kb.documents IS 'One row per source and collection; (collection, source_uri) is its identity for re-ingestion, content_sha skips unchanged sources.';

CREATE TABLE kb.collection_grants (
    role_name  text        NOT NULL CHECK (btrim(role_name) <> ''),
    collection text        REFERENCES kb.collections (name) ON DELETE CASCADE,
    granted_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX collection_grants_role_collection_key
    ON kb.collection_grants (role_name, coalesce(collection, ''));
COMMENT ON TABLE kb.collection_grants IS 'Which collections a role (and every role that is a member of it) may read through the kb functions; collection NULL = every collection. Written by pgkb db grant/revoke as the owner.';

GRANT SELECT, INSERT, UPDATE ON kb.collections TO kb_writer;

-- the readers of before keep reading everything
INSERT INTO kb.collection_grants (role_name, collection)
SELECT r.rolname, NULL
  FROM pg_catalog.pg_auth_members m
  JOIN pg_catalog.pg_roles g ON g.oid = m.roleid AND g.rolname = 'kb_reader'
  JOIN pg_catalog.pg_roles r ON r.oid = m.member
ON CONFLICT DO NOTHING;
"""  # noqa: E501

# 0019, 0020
STORAGE_UP = """
ALTER TABLE kb.term_postings ALTER COLUMN lexeme TYPE text COLLATE "C";
ALTER TABLE kb.chunks ALTER COLUMN tsv SET STORAGE MAIN;
"""

# 0024: keyword statistics per collection (kb.term_stats and kb.corpus_stats become views)
COLLECTION_STATISTICS_UP = """
CREATE TABLE kb.collection_stats (
    collection    text   PRIMARY KEY REFERENCES kb.collections (name) ON DELETE CASCADE,
    chunk_count   bigint NOT NULL DEFAULT 0,
    total_lexemes bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE kb.collection_stats IS 'Per collection: number of chunks and the sum of their lengths in distinct lexemes (length(tsv)), for BM25''s IDF and average chunk length; kept current by a trigger on kb.chunks.';
CREATE TABLE kb.collection_term_stats (
    lexeme     text    NOT NULL,
    collection text    NOT NULL,
    df         integer NOT NULL CHECK (df >= 0),
    PRIMARY KEY (lexeme, collection)
);
COMMENT ON TABLE kb.collection_term_stats IS 'Chunk frequency of each lexeme in each collection (chunks of the collection containing it), kept current by a trigger on kb.chunks.';
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.collection_stats, kb.collection_term_stats TO kb_writer;

-- each chunk's collection: the default fills a database of one collection without a rewrite
ALTER TABLE kb.chunks ADD COLUMN collection text DEFAULT 'default';
ALTER TABLE kb.chunks DISABLE TRIGGER chunks_stats_update;
UPDATE kb.chunks c SET collection = d.collection
  FROM kb.documents d
 WHERE d.id = c.document_id AND d.collection <> 'default';
ALTER TABLE kb.chunks ENABLE TRIGGER chunks_stats_update;
ALTER TABLE kb.chunks ALTER COLUMN collection DROP DEFAULT;
COMMENT ON COLUMN kb.chunks.collection IS 'The collection of the chunk''s document (set by a trigger, kept equal by the foreign key), for the per-collection keyword statistics.';
ALTER TABLE kb.documents ADD CONSTRAINT documents_id_collection_key UNIQUE (id, collection);
ALTER TABLE kb.chunks ADD CONSTRAINT chunks_document_collection_fkey
    FOREIGN KEY (document_id, collection) REFERENCES kb.documents (id, collection)
    MATCH FULL ON UPDATE CASCADE ON DELETE CASCADE NOT VALID;
ALTER TABLE kb.chunks VALIDATE CONSTRAINT chunks_document_collection_fkey;
ALTER TABLE kb.chunks DROP CONSTRAINT chunks_document_id_fkey;

-- the statistics per collection, from the chunks
INSERT INTO kb.collection_stats (collection, chunk_count, total_lexemes)
SELECT c.collection, count(*), coalesce(sum(length(c.tsv)), 0)
  FROM kb.chunks c GROUP BY c.collection ORDER BY c.collection;
DO $fill$
DECLARE
    names text[] := ARRAY(SELECT s.collection FROM kb.collection_stats s ORDER BY 1);
    name text;
BEGIN
    IF cardinality(names) = 1 THEN
        INSERT INTO kb.collection_term_stats (lexeme, collection, df)
        SELECT t.lexeme, names[1], t.df FROM kb.term_stats t WHERE t.df > 0 ORDER BY t.lexeme;
    ELSE
        FOREACH name IN ARRAY names LOOP
            INSERT INTO kb.collection_term_stats (lexeme, collection, df)
            SELECT s.word, name, s.ndoc
              FROM ts_stat(format('SELECT tsv FROM kb.chunks WHERE collection = %L', name)) AS s
             ORDER BY s.word;
        END LOOP;
    END IF;
END
$fill$;
DROP TABLE kb.term_stats, kb.corpus_stats;
CREATE VIEW kb.term_stats AS
SELECT t.lexeme, sum(t.df)::integer AS df
  FROM kb.collection_term_stats t
 GROUP BY t.lexeme;
COMMENT ON VIEW kb.term_stats IS 'Chunk frequency of each lexeme in the whole database: kb.collection_term_stats summed over every collection.';
CREATE VIEW kb.corpus_stats AS
SELECT coalesce(sum(s.chunk_count), 0)::bigint AS chunk_count,
       coalesce(sum(s.total_lexemes), 0)::bigint AS total_lexemes
  FROM kb.collection_stats s;
COMMENT ON VIEW kb.corpus_stats IS 'One row: number of chunks of the whole database and the sum of their lengths in distinct lexemes: kb.collection_stats summed.';
GRANT SELECT ON kb.term_stats, kb.corpus_stats TO kb_writer;
ANALYZE kb.collection_stats, kb.collection_term_stats;
"""  # noqa: E501

# 0025: what each model's HNSW index was built with
VECTOR_INDEXES_UP = """
CREATE TABLE kb.vector_indexes (
    model_id        integer     PRIMARY KEY REFERENCES kb.embedding_models (id) ON DELETE CASCADE,
    index_name      text        NOT NULL,
    m               integer     NOT NULL CHECK (m BETWEEN 2 AND 100),
    ef_construction integer     NOT NULL CHECK (ef_construction BETWEEN 4 AND 1000),
    ef_search       integer     NOT NULL CHECK (ef_search BETWEEN 1 AND 1000),
    embedding_count bigint      NOT NULL CHECK (embedding_count >= 0),
    sized_by        text        NOT NULL CHECK (sized_by IN ('corpus', 'setting')),
    built_at        timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.vector_indexes IS 'What each model''s HNSW index was built with (m, ef_construction), the ef_search kb.vector_search uses for it, the model''s embeddings at that moment, and whether the parameters were sized from that count (corpus, kb.hnsw_parameters) or given (setting). Written by kb.build_model_index.';

INSERT INTO kb.vector_indexes (model_id, index_name, m, ef_construction, ef_search,
                               embedding_count, sized_by)
SELECT em.id, i.relname, o.m, o.ef_construction, 200,
       (SELECT count(*) FROM kb.embeddings e WHERE e.model_id = em.id),
       CASE WHEN (o.m, o.ef_construction) = (16, 64) THEN 'corpus' ELSE 'setting' END
  FROM kb.embedding_models em
  JOIN pg_catalog.pg_class i ON i.relname = 'embeddings_hnsw_model_' || em.id
                            AND i.relnamespace = 'kb'::pg_catalog.regnamespace
 CROSS JOIN LATERAL (
     SELECT coalesce(max(split_part(r, '=', 2)::integer) FILTER (WHERE split_part(r, '=', 1) = 'm'), 16) AS m,
            coalesce(max(split_part(r, '=', 2)::integer)
                         FILTER (WHERE split_part(r, '=', 1) = 'ef_construction'), 64) AS ef_construction
       FROM unnest(coalesce(i.reloptions, '{}'::text[])) AS r) o;
"""  # noqa: E501

# 0028: the run log's failures
FAILURES_UP = """
ALTER TABLE kb.ingest_runs ADD COLUMN failures jsonb NOT NULL DEFAULT '[]'::jsonb
    CONSTRAINT ingest_runs_failures_check CHECK (jsonb_typeof(failures) = 'array');
COMMENT ON COLUMN kb.ingest_runs.failures IS
'The sources the run could not ingest: [{source, reason}], the first 100.';
"""

# --- after the functions: what calls them --------------------------------------------------------

# 0015: the policies call kb.collection_readable
POLICIES_UP = """
ALTER TABLE kb.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.document_relations ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.document_links ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    t text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        FOREACH t IN ARRAY ARRAY['documents', 'chunks', 'embeddings', 'document_relations',
                                 'document_links'] LOOP
            EXECUTE format('CREATE POLICY writer_all ON kb.%I TO kb_writer USING (true) WITH CHECK (true)', t);
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        CREATE POLICY reader_collections ON kb.documents FOR SELECT TO kb_reader
            USING (kb.collection_readable(collection));
        CREATE POLICY reader_collections ON kb.chunks FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = document_id AND kb.collection_readable(d.collection)));
        CREATE POLICY reader_collections ON kb.embeddings FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id
                            WHERE c.id = chunk_id AND kb.collection_readable(d.collection)));
        CREATE POLICY reader_collections ON kb.document_relations FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = source_id AND kb.collection_readable(d.collection))
               AND EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = target_id AND kb.collection_readable(d.collection)));
        CREATE POLICY reader_collections ON kb.document_links FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = source_id AND kb.collection_readable(d.collection)));
    END IF;
END
$$;
"""  # noqa: E501

# 0024, 0026: the triggers run kb.chunks_set_collection and kb.collections_keyword_index; 0033:
# the statistics and the postings rebuilt by this revision's kb.rebuild_keyword_stats
AFTER_FUNCTIONS_UP = """
CREATE TRIGGER chunks_set_collection BEFORE INSERT ON kb.chunks
    FOR EACH ROW EXECUTE FUNCTION kb.chunks_set_collection();
CREATE TRIGGER collections_keyword_index AFTER INSERT OR DELETE ON kb.collections
    FOR EACH ROW EXECUTE FUNCTION kb.collections_keyword_index();
SELECT kb.rebuild_keyword_stats();
"""

# --- downgrade, in the reverse order -------------------------------------------------------------

# 0026, 0024: the triggers and the bm25 indexes go with the functions that use them
KEYWORD_INDEX_TRIGGER_DOWN = """
DROP TRIGGER IF EXISTS collections_keyword_index ON kb.collections;
DROP TRIGGER chunks_set_collection ON kb.chunks;
DO $$
DECLARE
    i text;
BEGIN
    FOR i IN SELECT c.relname FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'kb'::pg_catalog.regnamespace AND c.relkind = 'i'
                AND c.relname LIKE 'chunks\\_bm25\\_%'
    LOOP
        EXECUTE format('DROP INDEX kb.%I', i);
    END LOOP;
END
$$;
"""

# 0015
POLICIES_DOWN = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM kb.documents GROUP BY source_uri HAVING count(*) > 1) THEN
        RAISE EXCEPTION 'cannot downgrade: some source_uri is ingested into several collections'
            USING HINT = 'remove the copies (pgkb remove --collection NAME ...) so each source is stored once, then downgrade';
    END IF;
END
$$;
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['documents', 'chunks', 'embeddings', 'document_relations',
                             'document_links'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS writer_all ON kb.%I', t);
        EXECUTE format('DROP POLICY IF EXISTS reader_collections ON kb.%I', t);
        EXECUTE format('ALTER TABLE kb.%I DISABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;
"""  # noqa: E501

# 0028, 0025
SCHEMA_DOWN = """
ALTER TABLE kb.ingest_runs DROP COLUMN failures;
DROP TABLE kb.vector_indexes;
"""

# 0024
COLLECTION_STATISTICS_DOWN = """
DROP VIEW kb.term_stats, kb.corpus_stats;
CREATE TABLE kb.term_stats (
    lexeme text PRIMARY KEY,
    df     integer NOT NULL CHECK (df >= 0)
);
COMMENT ON TABLE kb.term_stats IS 'Chunk frequency of each lexeme (number of chunks containing it), kept current by a trigger on kb.chunks.';
CREATE TABLE kb.corpus_stats (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    chunk_count   bigint  NOT NULL DEFAULT 0,
    total_lexemes bigint  NOT NULL DEFAULT 0
);
COMMENT ON TABLE kb.corpus_stats IS 'Single row: number of chunks and the sum of their lengths in distinct lexemes (length(tsv)), for BM25''s IDF and average chunk length.';
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.term_stats, kb.corpus_stats TO kb_writer;
INSERT INTO kb.term_stats (lexeme, df)
SELECT t.lexeme, sum(t.df) FROM kb.collection_term_stats t GROUP BY t.lexeme ORDER BY t.lexeme;
INSERT INTO kb.corpus_stats (chunk_count, total_lexemes)
SELECT coalesce(sum(s.chunk_count), 0), coalesce(sum(s.total_lexemes), 0) FROM kb.collection_stats s;
DROP TABLE kb.collection_term_stats, kb.collection_stats;
ALTER TABLE kb.chunks ADD CONSTRAINT chunks_document_id_fkey
    FOREIGN KEY (document_id) REFERENCES kb.documents (id) ON DELETE CASCADE;
ALTER TABLE kb.chunks DROP CONSTRAINT chunks_document_collection_fkey;
ALTER TABLE kb.documents DROP CONSTRAINT documents_id_collection_key;
ALTER TABLE kb.chunks DROP COLUMN collection;
"""  # noqa: E501

# 0020, 0012 (0019's collation goes with the table)
STORAGE_DOWN = """
ALTER TABLE kb.chunks ALTER COLUMN tsv SET STORAGE EXTENDED;
DROP TABLE kb.term_postings;
"""

# 0015
COLLECTIONS_DOWN = """
DROP TABLE kb.collection_grants;
DROP INDEX kb.documents_source_uri_idx;
ALTER TABLE kb.documents DROP CONSTRAINT documents_collection_source_uri_key;
ALTER TABLE kb.documents DROP COLUMN collection;
ALTER TABLE kb.documents ADD CONSTRAINT documents_source_uri_key UNIQUE (source_uri);
COMMENT ON TABLE kb.documents IS 'One row per source; source_uri is its identity for re-ingestion, content_sha skips unchanged sources.';
DROP TABLE kb.collections;
"""  # noqa: E501

# 0009: CREATE OR REPLACE keeps a function's privileges: give back what 0008 granted
GRANTS_DOWN = """
GRANT EXECUTE ON FUNCTION kb.active_model() TO PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        REVOKE EXECUTE ON FUNCTION kb.stats(integer) FROM kb_reader;
    END IF;
END
$$;
"""


def upgrade() -> None:
    conn = op.get_bind()
    for step in (
        TERM_POSTINGS_UP,
        COLLECTIONS_UP,
        STORAGE_UP,
        COLLECTION_STATISTICS_UP,
        VECTOR_INDEXES_UP,
        FAILURES_UP,
    ):
        run_sql(conn, step)
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(conn, POLICIES_UP)
    run_sql(conn, AFTER_FUNCTIONS_UP)


def downgrade() -> None:
    conn = op.get_bind()
    run_sql(conn, KEYWORD_INDEX_TRIGGER_DOWN)
    run_sql(conn, POLICIES_DOWN)  # the policies call functions the downgrade drops
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    for step in (SCHEMA_DOWN, COLLECTION_STATISTICS_DOWN, STORAGE_DOWN, COLLECTIONS_DOWN):
        run_sql(conn, step)
    run_sql(conn, GRANTS_DOWN)
