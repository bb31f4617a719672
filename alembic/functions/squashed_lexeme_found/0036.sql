-- kb.squashed_lexeme_found(squashed text) -> boolean
--
-- Is there a lexeme with separators in it, held by a chunk of the collections the caller reads
-- (kb.collection_term_stats within kb.collection_scope(NULL): its grants, narrowed by the
-- session's pgkb.collections; every collection when nothing narrows it) that, separators
-- removed, spells `squashed` (letters and digits, lower case) as written or stemmed
-- ('ipscderived' finds 'ipsc-deriv')? Lexemes without separators are left out, so a stem never
-- stands for a name. Only lexemes starting with squashed's first character are scanned (one
-- slice of the lexeme index). False for NULL or an empty text; the first 200 characters are
-- read. The abstention gate's check for names written with other separators. Reads only
-- (STABLE).
CREATE OR REPLACE FUNCTION kb.squashed_lexeme_found(squashed text)
RETURNS boolean
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH s AS (SELECT left(squashed_lexeme_found.squashed, 200) AS word),
    scope AS (SELECT kb.collection_scope(NULL) AS names)
    SELECT coalesce(s.word, '') <> ''
           AND EXISTS (
               SELECT 1 FROM kb.collection_term_stats t, scope
                WHERE t.df > 0
                  AND (scope.names IS NULL OR t.collection = ANY (scope.names))
                  AND t.lexeme >= left(s.word, 1)
                  AND t.lexeme < chr(ascii(left(s.word, 1)) + 1)
                  AND t.lexeme ~ '[^[:alnum:]]'
                  AND regexp_replace(t.lexeme, '[^[:alnum:]]', '', 'g')
                      IN (s.word, coalesce((ts_lexize('english_stem', s.word))[1], s.word)))
      FROM s;
$$;

COMMENT ON FUNCTION kb.squashed_lexeme_found(text) IS
'Whether a corpus lexeme with separators spells the given letters and digits (as written or stemmed). Maximum: 200 characters read.';

REVOKE ALL ON FUNCTION kb.squashed_lexeme_found(text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.squashed_lexeme_found(text) TO kb_reader;
    END IF;
END
$$;
