-- kb.word_lexemes(words text[])
--   -> TABLE (word text, absent boolean, lexemes text[])
--
-- For each word (the first 200; each read up to 200 characters): its lexemes
-- (to_tsvector('english')), and absent = true when it has lexemes and none of them occurs in the
-- corpus (kb.term_df: the whole corpus, or only the collections of a caller granted some). Stop
-- words have no lexemes and are never absent. One row per distinct word, in no particular order.
-- The abstention gate's rare-word check. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.word_lexemes(words text[])
RETURNS TABLE (word text, absent boolean, lexemes text[])
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH l AS (
        SELECT w.word, x.lexeme
          FROM (SELECT DISTINCT left(x, 200) AS word
                  FROM unnest(word_lexemes.words[1:200]) AS x
                 WHERE x IS NOT NULL) AS w
          LEFT JOIN LATERAL unnest(to_tsvector('english'::regconfig, w.word)) AS x ON true
    ),
    known AS (
        SELECT t.lexeme FROM kb.term_df(ARRAY(SELECT DISTINCT l.lexeme FROM l)) t WHERE t.df > 0
    )
    SELECT l.word,
           coalesce(bool_and(k.lexeme IS NULL), false) AND count(l.lexeme) > 0,
           array_remove(array_agg(l.lexeme), NULL)
      FROM l LEFT JOIN known k ON k.lexeme = l.lexeme
     GROUP BY l.word;
$$;

COMMENT ON FUNCTION kb.word_lexemes(text[]) IS
'Each word''s lexemes and whether none of them occurs in the corpus (the abstention gate''s rare-word check). Maximum: 200 words of 200 characters.';

REVOKE ALL ON FUNCTION kb.word_lexemes(text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.word_lexemes(text[]) TO kb_reader;
    END IF;
END
$$;
