-- kb.query_terms(query_text text) -> TABLE (lexeme text, df integer, idf double precision)
--
-- The lexemes of query_text (to_tsvector('english'), each once, in lexeme order) with their
-- document frequency in the corpus (df = chunks whose tsv holds the lexeme, 0 when none does)
-- and BM25's inverse document frequency, the same formula kb.keyword_search ranks with:
--     idf = ln(1 + (N - df + 0.5) / (df + 0.5)), N = kb.corpus_stats.chunk_count (at least 1).
-- The abstention gate reads it for its unknown-term and coverage signals. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.query_terms(query_text text)
RETURNS TABLE (lexeme text, df integer, idf double precision)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = kb, public, pg_temp
AS $$
    WITH q AS (
        SELECT DISTINCT l.lexeme
          FROM pg_catalog.unnest(pg_catalog.to_tsvector('english', query_text)) AS l
    ), n AS (
        SELECT greatest(s.chunk_count, 1)::double precision AS n FROM kb.corpus_stats s
    )
    SELECT q.lexeme,
           coalesce(t.df, 0),
           pg_catalog.ln(1 + (n.n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5))
      FROM q CROSS JOIN n LEFT JOIN kb.term_stats t ON t.lexeme = q.lexeme
     ORDER BY q.lexeme;
$$;

COMMENT ON FUNCTION kb.query_terms(text) IS
'The lexemes of a query with their document frequency (df) and BM25 IDF, as kb.keyword_search computes it; the abstention gate''s term statistics.';

REVOKE ALL ON FUNCTION kb.query_terms(text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.query_terms(text) TO kb_reader;
    END IF;
END
$$;
