-- kb.term_df(lexemes text[]) -> TABLE (lexeme text, df integer)
--
-- The chunk frequency of each lexeme (distinct, the first 5,000; NULLs skipped) as the caller
-- may know it: for a caller who may read every collection (kb.readable_collections NULL) the
-- corpus-wide kb.term_stats; for a caller granted only some collections, the number of chunks of
-- those collections whose tsv holds the lexeme (counted through the GIN index on kb.chunks.tsv),
-- so no answer depends on a collection the caller may not read. 0 when no chunk holds it. In no
-- particular order. What the abstention signals (kb.query_terms, kb.word_lexemes,
-- kb.near_lexemes, kb.squashed_lexeme_found) read. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.term_df(lexemes text[])
RETURNS TABLE (lexeme text, df integer)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    readable text[] := kb.readable_collections();
BEGIN
    IF readable IS NULL THEN
        RETURN QUERY
        SELECT u.x, coalesce(t.df, 0)
          FROM (SELECT DISTINCT x FROM pg_catalog.unnest(term_df.lexemes[1:5000]) AS x
                 WHERE x IS NOT NULL) u
          LEFT JOIN kb.term_stats t ON t.lexeme = u.x;
    ELSE
        RETURN QUERY
        SELECT u.x,
               (SELECT count(*)::integer
                  FROM kb.chunks c
                  JOIN kb.documents d ON d.id = c.document_id
                 WHERE c.tsv @@ ('''' || pg_catalog.replace(pg_catalog.replace(u.x, '\', '\\'),
                                                            '''', '''''') || '''')::tsquery
                   AND d.collection = ANY (readable))
          FROM (SELECT DISTINCT x FROM pg_catalog.unnest(term_df.lexemes[1:5000]) AS x
                 WHERE x IS NOT NULL AND x <> '') u;
    END IF;
END;
$$;

COMMENT ON FUNCTION kb.term_df(text[]) IS
'Chunk frequency of each lexeme as the caller may know it: kb.term_stats for a caller who reads every collection, otherwise counted in the chunks of its collections only. Maximum: 5000 lexemes.';

REVOKE ALL ON FUNCTION kb.term_df(text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.term_df(text[]) TO kb_reader;
    END IF;
END
$$;
