-- kb.near_lexemes(lexeme text) -> SETOF text
--
-- Lexemes of the collections the caller reads (kb.collection_term_stats within
-- kb.collection_scope(NULL): its grants, narrowed by the session's pgkb.collections; every
-- collection when nothing narrows it) that could be the word a misspelt `lexeme` meant: the
-- same first two characters and a length within one of it. The edit distance itself is computed
-- by the caller (the abstention gate) on this short list. No rows for a lexeme shorter than 2
-- characters; at most 5,000 rows, in no particular order. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.near_lexemes(lexeme text)
RETURNS SETOF text
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH scope AS (SELECT kb.collection_scope(NULL) AS names)
    SELECT DISTINCT t.lexeme
      FROM kb.collection_term_stats t, scope
     WHERE length(near_lexemes.lexeme) >= 2
       AND t.df > 0
       AND (scope.names IS NULL OR t.collection = ANY (scope.names))
       AND t.lexeme LIKE replace(replace(replace(left(near_lexemes.lexeme, 2), '\', '\\'),
                                         '%', '\%'), '_', '\_') || '%'
       AND length(t.lexeme) BETWEEN length(near_lexemes.lexeme) - 1
                                AND length(near_lexemes.lexeme) + 1
     LIMIT 5000;
$$;

COMMENT ON FUNCTION kb.near_lexemes(text) IS
'Lexemes of the collections the caller reads with the same first two characters as a word and a length within one of it: the candidates for a misspelling. Maximum: 5000 rows.';

REVOKE ALL ON FUNCTION kb.near_lexemes(text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.near_lexemes(text) TO kb_reader;
    END IF;
END
$$;
