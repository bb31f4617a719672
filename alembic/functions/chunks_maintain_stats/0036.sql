-- kb.chunks_maintain_stats(): statement-level trigger keeping the keyword statistics current.
--
-- Fired AFTER INSERT, DELETE and UPDATE on kb.chunks with transition tables (new_rows, old_rows).
-- Maintains, in the same transaction as the change, per collection (kb.chunks.collection):
--   kb.collection_term_stats(lexeme, collection, df)   df = chunks of the collection whose tsv
--                               contains the lexeme (rows reaching 0 are deleted);
--   kb.collection_stats         chunk_count and total_lexemes (sum of length(tsv): distinct
--                               lexemes per chunk, the chunk length kb.keyword_search's BM25
--                               uses) of each collection;
-- and for the whole database
--   kb.term_postings            every posting (lexeme, impact, chunk) of every lexeme held by
--                               more than 100 chunks of the database (impact:
--                               kb.term_impacts): a lexeme that passes 100 gets its whole
--                               list, one that falls back loses it,
-- the statistics a BM25 ranking needs (IDF and average chunk length, for any set of
-- collections: kb.term_stats and kb.corpus_stats are their sums over every collection) and the
-- common words' impact-ordered postings that bound kb.keyword_search. Rows are upserted in
-- sorted order so concurrent writers cannot deadlock. An INSERT statement of at least 10,000
-- rows that at least doubles the database's chunks (a bulk load, e.g. one COPY of a whole
-- corpus) calls kb.rebuild_keyword_stats() instead: the same statistics, recomputed set-wise.
-- With the setting pgkb.defer_keyword_stats = 'on' (SET LOCAL, by a loader writing through
-- several connections at once) it does nothing: that loader must call
-- kb.rebuild_keyword_stats() once its writes are committed (until then the statistics are
-- stale). Returns NULL (statement triggers return nothing).
CREATE OR REPLACE FUNCTION kb.chunks_maintain_stats()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    common  text[];
    crossed text[];
    n       bigint;
BEGIN
    -- a loader that set pgkb.defer_keyword_stats calls kb.rebuild_keyword_stats() after its load
    IF current_setting('pgkb.defer_keyword_stats', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE kb.collection_stats s
           SET chunk_count = s.chunk_count - d.n,
               total_lexemes = s.total_lexemes - d.len
          FROM (SELECT o.collection, count(*) AS n, coalesce(sum(length(o.tsv)), 0) AS len
                  FROM old_rows o
                 GROUP BY o.collection) d
         WHERE s.collection = d.collection;
        UPDATE kb.collection_term_stats t
           SET df = t.df - d.df
          FROM (SELECT lex.lexeme, o.collection, count(*) AS df
                  FROM old_rows o, unnest(o.tsv) AS lex
                 GROUP BY lex.lexeme, o.collection
                 ORDER BY lex.lexeme, o.collection) d
         WHERE t.lexeme = d.lexeme AND t.collection = d.collection;
        DELETE FROM kb.collection_term_stats t
         USING (SELECT DISTINCT lex.lexeme, o.collection FROM old_rows o, unnest(o.tsv) AS lex) d
         WHERE t.lexeme = d.lexeme AND t.collection = d.collection AND t.df <= 0;
        -- the old chunks' postings (found again by their impacts), then the whole lists of the
        -- lexemes now held by 100 chunks or fewer
        DELETE FROM kb.term_postings p
         USING (SELECT o.id, i.lexeme, i.impact FROM old_rows o, kb.term_impacts(o.tsv) AS i) x
         WHERE p.lexeme = x.lexeme AND p.impact = x.impact AND p.chunk_id = x.id;
        DELETE FROM kb.term_postings p
         USING (SELECT DISTINCT lex.lexeme FROM old_rows o, unnest(o.tsv) AS lex) d
         WHERE p.lexeme = d.lexeme
           AND coalesce((SELECT sum(t.df) FROM kb.collection_term_stats t
                          WHERE t.lexeme = d.lexeme), 0) <= 100;
    END IF;

    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT count(*) INTO n FROM new_rows;
        -- a bulk load (this statement at least doubles a database of 10,000 chunks or more):
        -- recompute everything set-wise instead, cheaper than the row-wise upkeep below
        IF TG_OP = 'INSERT' AND n >= 10000
           AND n >= (SELECT coalesce(sum(s.chunk_count), 0) FROM kb.collection_stats s) THEN
            PERFORM kb.rebuild_keyword_stats();
            RETURN NULL;
        END IF;
        INSERT INTO kb.collection_stats AS s (collection, chunk_count, total_lexemes)
        SELECT nr.collection, count(*), coalesce(sum(length(nr.tsv)), 0)
          FROM new_rows nr
         GROUP BY nr.collection
         ORDER BY nr.collection
        ON CONFLICT (collection) DO UPDATE
           SET chunk_count = s.chunk_count + excluded.chunk_count,
               total_lexemes = s.total_lexemes + excluded.total_lexemes;
        INSERT INTO kb.collection_term_stats AS t (lexeme, collection, df)
        SELECT lex.lexeme, nr.collection, count(*)
          FROM new_rows nr, unnest(nr.tsv) AS lex
         GROUP BY lex.lexeme, nr.collection
         ORDER BY lex.lexeme, nr.collection
        ON CONFLICT (lexeme, collection) DO UPDATE SET df = t.df + excluded.df;

        -- the statement's lexemes now held by more than 100 chunks of the database, and those
        -- of them this statement took past 100
        SELECT array_agg(g.lexeme) FILTER (WHERE g.df > 100),
               array_agg(g.lexeme) FILTER (WHERE g.df > 100 AND g.df - g.n <= 100)
          INTO common, crossed
          FROM (SELECT a.lexeme, a.n,
                       (SELECT sum(t.df) FROM kb.collection_term_stats t
                         WHERE t.lexeme = a.lexeme) AS df
                  FROM (SELECT lex.lexeme, count(*) AS n
                          FROM new_rows nr, unnest(nr.tsv) AS lex
                         GROUP BY lex.lexeme) a) g;
        -- the new chunks' postings of every common lexeme (sorted: a bulk load appends to the
        -- index instead of inserting at random places) ...
        INSERT INTO kb.term_postings (lexeme, impact, chunk_id)
        SELECT i.lexeme, i.impact, nr.id
          FROM new_rows nr, kb.term_impacts(nr.tsv) AS i, unnest(common) AS c(lexeme)
         WHERE c.lexeme = i.lexeme
         ORDER BY 1, 2, 3;
        -- ... and, for the lexemes this statement took past 100, the postings of the chunks
        -- stored before it: through the GIN index for a few such lexemes (an incremental
        -- ingest), by one pass over the chunks for many (a bulk load)
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
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION kb.chunks_maintain_stats() IS
'Trigger: keeps kb.collection_term_stats (chunk frequency per lexeme and collection), kb.collection_stats (chunk count, sum of distinct lexemes per chunk, per collection) and kb.term_postings (impact-ordered postings of lexemes in more than 100 chunks) in step with kb.chunks, for BM25 ranking.';
