-- kb.chunks_maintain_stats(): statement-level trigger keeping the keyword statistics current.
--
-- Fired AFTER INSERT, DELETE and UPDATE on kb.chunks with transition tables (new_rows, old_rows).
-- Maintains, in the same transaction as the change:
--   kb.term_stats(lexeme, df)   df = number of chunks whose tsv contains the lexeme;
--   kb.corpus_stats             chunk_count and total_lexemes (sum of length(tsv): distinct
--                               lexemes per chunk, the chunk length kb.keyword_search's BM25 uses),
--   kb.term_postings            every posting (lexeme, impact, chunk) of every lexeme held by
--                               more than 1,000 chunks (impact: kb.term_impacts): a lexeme that
--                               passes 1,000 gets its whole list, one that falls back loses it,
-- the corpus statistics a BM25 ranking needs (IDF and average chunk length) and the common
-- words' impact-ordered postings that bound kb.keyword_search. Lexemes are upserted in sorted
-- order so concurrent writers cannot deadlock on kb.term_stats. An INSERT statement of at least
-- 10,000 rows that at least doubles the corpus (a bulk load, e.g. one COPY of a whole corpus)
-- calls kb.rebuild_keyword_stats() instead: the same statistics, recomputed set-wise. With the
-- setting pgkb.defer_keyword_stats = 'on' (SET LOCAL, by a loader writing through several
-- connections at once) it does nothing: that loader must call kb.rebuild_keyword_stats() once
-- its writes are committed (until then the statistics are stale).
-- Returns NULL (statement triggers return nothing).
CREATE OR REPLACE FUNCTION kb.chunks_maintain_stats()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    crossed      text[];
    delta_count  bigint := 0;
    delta_length bigint := 0;
    n            bigint;
    len          bigint;
BEGIN
    -- a loader that set pgkb.defer_keyword_stats calls kb.rebuild_keyword_stats() after its load
    IF current_setting('pgkb.defer_keyword_stats', true) = 'on' THEN
        RETURN NULL;
    END IF;
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
        -- the old chunks' postings (found again by their impacts), then the whole lists of the
        -- lexemes now held by 1,000 chunks or fewer
        DELETE FROM kb.term_postings p
         USING (SELECT o.id, i.lexeme, i.impact FROM old_rows o, kb.term_impacts(o.tsv) AS i) x
         WHERE p.lexeme = x.lexeme AND p.impact = x.impact AND p.chunk_id = x.id;
        DELETE FROM kb.term_postings p
         USING (SELECT DISTINCT lex.lexeme FROM old_rows o, unnest(o.tsv) AS lex) d
          LEFT JOIN kb.term_stats t ON t.lexeme = d.lexeme
         WHERE p.lexeme = d.lexeme AND coalesce(t.df, 0) <= 1000;
        DELETE FROM kb.term_stats WHERE df <= 0;
    END IF;

    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(length(nr.tsv)), 0)
          INTO n, len
          FROM new_rows nr;
        -- a bulk load (this statement at least doubles a corpus of 10,000 chunks or more):
        -- recompute everything set-wise instead, cheaper than the row-wise upkeep below
        IF TG_OP = 'INSERT' AND n >= 10000
           AND n >= (SELECT s.chunk_count FROM kb.corpus_stats s) THEN
            PERFORM kb.rebuild_keyword_stats();
            RETURN NULL;
        END IF;
        delta_count := delta_count + n;
        delta_length := delta_length + len;

        INSERT INTO kb.term_stats AS t (lexeme, df)
        SELECT lex.lexeme, count(*)
          FROM new_rows nr, unnest(nr.tsv) AS lex
         GROUP BY lex.lexeme
         ORDER BY lex.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = t.df + excluded.df;

        -- the new chunks' postings of every lexeme now held by more than 1,000 chunks (sorted:
        -- a bulk load appends to the index instead of inserting at random places) ...
        INSERT INTO kb.term_postings (lexeme, impact, chunk_id)
        SELECT i.lexeme, i.impact, nr.id
          FROM new_rows nr, kb.term_impacts(nr.tsv) AS i, kb.term_stats t
         WHERE t.lexeme = i.lexeme AND t.df > 1000
         ORDER BY 1, 2, 3;
        -- ... and, for the lexemes this statement took past 1,000, the postings of the chunks
        -- stored before it: through the GIN index for a few such lexemes (an incremental
        -- ingest), by one pass over the chunks for many (a bulk load)
        SELECT array_agg(a.lexeme) INTO crossed
          FROM (SELECT lex.lexeme, count(*) AS n
                  FROM new_rows nr, unnest(nr.tsv) AS lex
                 GROUP BY lex.lexeme) a
          JOIN kb.term_stats t ON t.lexeme = a.lexeme
         WHERE t.df > 1000 AND t.df - a.n <= 1000;
        IF cardinality(crossed) <= 16 THEN
            INSERT INTO kb.term_postings (lexeme, impact, chunk_id)
            SELECT i.lexeme, i.impact, c.id
              FROM kb.chunks c, kb.term_impacts(c.tsv) AS i
             WHERE c.tsv @@ (SELECT string_agg('''' || replace(replace(l, '\', '\\'), '''', '''''')
                                               || '''', ' | ')::tsquery
                               FROM unnest(crossed) AS l)
               AND i.lexeme = ANY (crossed)
               AND NOT EXISTS (SELECT 1 FROM new_rows nr WHERE nr.id = c.id);
        ELSIF crossed IS NOT NULL THEN
            INSERT INTO kb.term_postings (lexeme, impact, chunk_id)
            SELECT i.lexeme, i.impact, c.id
              FROM kb.chunks c, kb.term_impacts(c.tsv) AS i, unnest(crossed) AS x(lexeme)
             WHERE i.lexeme = x.lexeme
               AND NOT EXISTS (SELECT 1 FROM new_rows nr WHERE nr.id = c.id);
        END IF;
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
'Trigger: keeps kb.term_stats (chunk frequency per lexeme), kb.corpus_stats (chunk count, sum of distinct lexemes per chunk) and kb.term_postings (impact-ordered postings of lexemes in more than 1000 chunks) in step with kb.chunks, for BM25 ranking.';
