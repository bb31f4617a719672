-- kb.squashed_lexeme_found(squashed text) -> boolean
--
-- Is there a corpus lexeme with separators in it (kb.term_stats, df > 0; for a caller granted
-- only some collections, one its collections hold, kb.term_df) that, separators
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
    candidates AS (
        SELECT t.lexeme FROM kb.term_stats t, s
         WHERE coalesce(s.word, '') <> ''
           AND t.df > 0
           AND t.lexeme >= left(s.word, 1)
           AND t.lexeme < chr(ascii(left(s.word, 1)) + 1)
           AND t.lexeme ~ '[^[:alnum:]]'
           AND regexp_replace(t.lexeme, '[^[:alnum:]]', '', 'g')
               IN (s.word, coalesce((ts_lexize('english_stem', s.word))[1], s.word))
    )
    SELECT coalesce(s.word, '') <> ''
           AND CASE WHEN kb.readable_collections() IS NULL
                    THEN EXISTS (SELECT 1 FROM candidates)
                    ELSE EXISTS (SELECT 1 FROM kb.term_df(ARRAY(SELECT c.lexeme FROM candidates c)) d
                                  WHERE d.df > 0)
               END
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
