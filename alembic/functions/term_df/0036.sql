-- kb.term_df(lexemes text[]) -> TABLE (lexeme text, df integer)
--
-- The chunk frequency of each lexeme (distinct, the first 5,000; NULLs skipped) in the
-- collections the caller reads (kb.collection_scope(NULL): its grants, narrowed by the
-- session's pgkb.collections; every collection when nothing narrows it), summed from
-- kb.collection_term_stats, so no answer depends on a collection outside them. 0 when no chunk
-- of them holds it. In no particular order. What the abstention signals (kb.query_terms,
-- kb.word_lexemes, kb.near_lexemes, kb.squashed_lexeme_found) read. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.term_df(lexemes text[])
RETURNS TABLE (lexeme text, df integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH scope AS (SELECT kb.collection_scope(NULL) AS names)
    SELECT u.x, coalesce(sum(t.df), 0)::integer
      FROM (SELECT DISTINCT x FROM pg_catalog.unnest(term_df.lexemes[1:5000]) AS x
             WHERE x IS NOT NULL) u
     CROSS JOIN scope
      LEFT JOIN kb.collection_term_stats t
        ON t.lexeme = u.x AND (scope.names IS NULL OR t.collection = ANY (scope.names))
     GROUP BY u.x;
$$;

COMMENT ON FUNCTION kb.term_df(text[]) IS
'Chunk frequency of each lexeme in the collections the caller reads (its grants, narrowed by the session''s pgkb.collections). Maximum: 5000 lexemes.';

REVOKE ALL ON FUNCTION kb.term_df(text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.term_df(text[]) TO kb_reader;
    END IF;
END
$$;
