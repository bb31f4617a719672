-- kb.term_df(lexemes text[]) -> TABLE (lexeme text, df integer)
--
-- The chunk frequency of each lexeme (distinct, the first 5,000; NULLs skipped) as the caller
-- may know it: for a caller who may read every collection (kb.readable_collections NULL) the
-- corpus-wide kb.term_stats; for a caller granted only some collections, the number of chunks of
-- those collections whose tsv holds the lexeme, so no answer depends on a collection the caller
-- may not read. 0 when no chunk holds it. In no particular order. What the abstention signals
-- (kb.query_terms, kb.word_lexemes, kb.near_lexemes, kb.squashed_lexeme_found) and the fusion's
-- keyword evidence (kb.hybrid_search through kb.query_terms) read. Reads only (STABLE).
--
-- A granted caller's counts are taken the cheaper of two ways, chosen per call: through the
-- GIN index on kb.chunks.tsv (work grows with the lexemes' postings in the whole database, which
-- kb.term_stats gives), or by reading the tsvectors of the readable collections' chunks once
-- (work grows with their size). A common word in a large database and a small collection take
-- the second; a rare word, or a collection holding most of the database, the first. A lexeme no
-- chunk of the database holds is 0 without counting.
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
    wanted text[];
    postings bigint;
    scope bigint;
BEGIN
    IF readable IS NULL THEN
        RETURN QUERY
        SELECT u.x, coalesce(t.df, 0)
          FROM (SELECT DISTINCT x FROM pg_catalog.unnest(term_df.lexemes[1:5000]) AS x
                 WHERE x IS NOT NULL) u
          LEFT JOIN kb.term_stats t ON t.lexeme = u.x;
        RETURN;
    END IF;
    -- the postings the index way would read, and (counting no further than that) the chunks the
    -- scan way would read
    SELECT coalesce(sum(t.df), 0) INTO postings
      FROM kb.term_stats t
     WHERE t.lexeme = ANY (term_df.lexemes[1:5000]);
    SELECT count(*) INTO scope
      FROM (SELECT 1
              FROM kb.chunks c
              JOIN kb.documents d ON d.id = c.document_id
             WHERE d.collection = ANY (readable)
             LIMIT postings + 1) s;
    IF scope <= postings THEN
        -- each chunk's tsvector read once, its lexemes compared with the wanted ones
        SELECT pg_catalog.array_agg(DISTINCT x) INTO wanted
          FROM pg_catalog.unnest(term_df.lexemes[1:5000]) AS x
         WHERE x IS NOT NULL AND x <> '';
        RETURN QUERY
        WITH held AS (
            SELECT l.lexeme, count(*)::integer AS n
              FROM kb.chunks c
              JOIN kb.documents d ON d.id = c.document_id
              CROSS JOIN LATERAL pg_catalog.unnest(c.tsv) AS l
             WHERE d.collection = ANY (readable)
               AND l.lexeme = ANY (wanted)
             GROUP BY l.lexeme
        )
        SELECT u.x, coalesce(h.n, 0)
          FROM pg_catalog.unnest(wanted) AS u(x)
          LEFT JOIN held h ON h.lexeme = u.x;
    ELSE
        RETURN QUERY
        SELECT u.x,
               CASE WHEN NOT EXISTS (SELECT 1 FROM kb.term_stats t WHERE t.lexeme = u.x) THEN 0
                    ELSE (SELECT count(*)::integer
                            FROM kb.chunks c
                            JOIN kb.documents d ON d.id = c.document_id
                           WHERE c.tsv @@ ('''' || pg_catalog.replace(pg_catalog.replace(u.x, '\', '\\'),
                                                                      '''', '''''') || '''')::tsquery
                             AND d.collection = ANY (readable))
               END
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
