-- kb.chunks_maintain_stats(): statement-level trigger keeping the keyword statistics current.
--
-- Fired AFTER INSERT, DELETE and UPDATE on kb.chunks with transition tables (new_rows, old_rows).
-- Maintains, in the same transaction as the change:
--   kb.term_stats(lexeme, df)   df = number of chunks whose tsv contains the lexeme;
--   kb.corpus_stats             chunk_count and total_lexemes (sum of length(tsv): distinct
--                               lexemes per chunk, the chunk length kb.keyword_search's BM25 uses),
-- the corpus statistics a BM25 ranking needs (IDF and average chunk length). Lexemes are
-- upserted in sorted order so concurrent writers cannot deadlock on kb.term_stats.
-- Returns NULL (statement triggers return nothing).
CREATE OR REPLACE FUNCTION kb.chunks_maintain_stats()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    delta_count  bigint := 0;
    delta_length bigint := 0;
    n            bigint;
    len          bigint;
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(length(o.tsv)), 0)
          INTO n, len
          FROM old_rows o;
        delta_count := delta_count - n;
        delta_length := delta_length - len;

        UPDATE kb.term_stats t
           SET df = t.df - d.df
          FROM (SELECT lex.lexeme, count(*) AS df
                  FROM old_rows o, unnest(o.tsv) AS lex
                 GROUP BY lex.lexeme) d
         WHERE t.lexeme = d.lexeme;
        DELETE FROM kb.term_stats WHERE df <= 0;
    END IF;

    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(length(nr.tsv)), 0)
          INTO n, len
          FROM new_rows nr;
        delta_count := delta_count + n;
        delta_length := delta_length + len;

        INSERT INTO kb.term_stats AS t (lexeme, df)
        SELECT lex.lexeme, count(*)
          FROM new_rows nr, unnest(nr.tsv) AS lex
         GROUP BY lex.lexeme
         ORDER BY lex.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = t.df + excluded.df;
    END IF;

    IF delta_count <> 0 OR delta_length <> 0 THEN
        UPDATE kb.corpus_stats
           SET chunk_count = chunk_count + delta_count,
               total_lexemes = total_lexemes + delta_length;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION kb.chunks_maintain_stats() IS
'Trigger: keeps kb.term_stats (chunk frequency per lexeme) and kb.corpus_stats (chunk count, sum of distinct lexemes per chunk) in step with kb.chunks, for BM25 ranking.';
