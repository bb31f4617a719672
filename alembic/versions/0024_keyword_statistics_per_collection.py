"""Keyword statistics per collection; the keyword leg scores its candidates in one pass; quoted
parts are requirements; kb.finish_load after a load.

- kb.chunks.collection (the document's collection, set by a row trigger, kept equal by a
  foreign key (document_id, collection) with ON UPDATE CASCADE), so the statistics trigger knows
  each chunk's collection, also when a deleted document takes its chunks with it. A database of
  one collection is not rewritten (the column's default fills it); chunks of other collections
  are updated once.
- kb.collection_term_stats (lexeme, collection, df) and kb.collection_stats (collection,
  chunk_count, total_lexemes) replace the tables kb.term_stats and kb.corpus_stats, which become
  views summing them over every collection: the searches and the abstention signals count only
  the collections a call reads.
- kb.keyword_search: the same candidates, the same scores, read from each candidate's tsv in one
  pass; a "quoted phrase" or identifier is required.
- kb.finish_load: the GIN pending list merged and the tables analyzed after a load.

Revision ID: 0024
Revises: 0023
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0024.sql
FUNCTIONS = (
    "chunks_maintain_stats",
    "chunks_set_collection",
    "finish_load",
    "hybrid_search",
    "keyword_search",
    "near_lexemes",
    "query_terms",
    "rebuild_keyword_stats",
    "search_query",
    "squashed_lexeme_found",
    "stats",
    "table_rows",
    "term_df",
)

SCHEMA_UP = """
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
"""  # noqa: E501 (SQL: comments on tables and columns are one line each)

TRIGGERS_UP = """
CREATE TRIGGER chunks_set_collection BEFORE INSERT ON kb.chunks
    FOR EACH ROW EXECUTE FUNCTION kb.chunks_set_collection();
"""

TRIGGERS_DOWN = "DROP TRIGGER chunks_set_collection ON kb.chunks;"

SCHEMA_DOWN = """
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
"""  # noqa: E501 (SQL: comments on tables and columns are one line each)


def upgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), TRIGGERS_UP)


def downgrade() -> None:
    run_sql(op.get_bind(), TRIGGERS_DOWN)
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), SCHEMA_DOWN)
