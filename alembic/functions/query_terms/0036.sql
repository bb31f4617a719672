-- kb.query_terms(query_text text) -> TABLE (lexeme text, df integer, idf double precision)
--
-- The lexemes of query_text (to_tsvector('english'), each once, in lexeme order) with their
-- document frequency in the corpus (df = chunks whose tsv holds the lexeme, 0 when none does)
-- and BM25's inverse document frequency, the same formula kb.keyword_search ranks with:
--     idf = ln(1 + (N - df + 0.5) / (df + 0.5)), N = the chunk count (at least 1).
-- df and N count the chunks of the collections the caller reads (kb.collection_scope(NULL): its
-- grants, narrowed by the session's pgkb.collections, as `pgkb ask --collection` and the
-- servers' per-call collections set it; every collection when nothing narrows it), so nothing
-- depends on a collection outside them.
-- Only the first 20,000 characters of query_text are read (as kb.search_query does): whatever
-- the caller passes, the work is bounded and no text raises (NULL gives no rows).
-- The abstention gate reads it for its unknown-term and coverage signals. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.query_terms(query_text text)
RETURNS TABLE (lexeme text, df integer, idf double precision)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH q AS (
        SELECT DISTINCT l.lexeme
          FROM pg_catalog.unnest(pg_catalog.to_tsvector('english'::pg_catalog.regconfig,
                                                       pg_catalog.left(query_text, 20000))) AS l
    ), r AS (
        SELECT kb.collection_scope(NULL) AS names
    ), n AS (
        SELECT greatest(coalesce(sum(s.chunk_count), 0), 1)::pg_catalog.float8 AS n
          FROM r, kb.collection_stats s
         WHERE r.names IS NULL OR s.collection = ANY (r.names)
    )
    SELECT q.lexeme,
           coalesce(t.df, 0),
           pg_catalog.ln(1 + (n.n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5))
      FROM q CROSS JOIN n
      LEFT JOIN kb.term_df(ARRAY(SELECT q2.lexeme FROM q q2)) t ON t.lexeme = q.lexeme
     ORDER BY q.lexeme;
$$;

COMMENT ON FUNCTION kb.query_terms(text) IS
'The lexemes of a query with their document frequency (df) and BM25 IDF in the collections the caller reads, as kb.keyword_search computes it; the abstention gate''s term statistics. Maximum: the first 20000 characters of the text are read.';

REVOKE ALL ON FUNCTION kb.query_terms(text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.query_terms(text) TO kb_reader;
    END IF;
END
$$;
