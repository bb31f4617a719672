-- kb.rebuild_keyword_stats() -> jsonb
--
-- Recomputes the keyword statistics from kb.chunks in a few set-wise statements, replacing
-- whatever they held: kb.collection_term_stats (chunks of each collection holding each lexeme),
-- kb.collection_stats (chunk count and sum of length(tsv) per collection) and kb.term_postings
-- (every posting of every lexeme held by more than 100 chunks of the database, with its
-- kb.term_impacts impact), then ANALYZE of the three, so the planner knows their sizes at once.
-- The result equals what the statistics trigger (kb.chunks_maintain_stats) keeps row by row; it
-- is the bulk path: the trigger calls it for a statement that at least doubles a database of
-- 10,000 chunks or more (one COPY of a whole corpus), and a loader that deferred the trigger
-- (pgkb.defer_keyword_stats = 'on', e.g. several COPY streams at once) calls it once after the
-- load. kb.term_postings is emptied and its primary key dropped while the postings are
-- written, then built once (a sorted build instead of millions of index insertions; a parallel
-- build when the session allows it: max_parallel_maintenance_workers > 0 and
-- maintenance_work_mem at least 32MB per process). The document frequencies come from ts_stat
-- (in C, one pass over the tsvectors of each collection). The impacts are kb.term_impacts'
-- values, computed here by the same expression set-wise: one call of kb.term_impacts per chunk
-- cost 70 µs (a SQL function with a pinned search_path is not inlined), and its length term
-- (numeric arithmetic, and a detoast of the tsvector when the planner places it per posting)
-- is computed once per chunk here. Takes ACCESS EXCLUSIVE locks on the three tables until the
-- transaction ends: keyword searches wait for the load's commit.
-- Returns {"chunks": n, "lexemes": n, "postings": n} (lexemes: distinct lexemes of the
-- database). EXECUTE for kb_writer only (SECURITY DEFINER: the writer may not alter the tables
-- itself).
CREATE OR REPLACE FUNCTION kb.rebuild_keyword_stats()
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names      text[];
    name       text;
    n_chunks   bigint;
    n_lexemes  bigint;
    n_postings bigint;
BEGIN
    LOCK TABLE kb.collection_term_stats, kb.collection_stats, kb.term_postings
        IN ACCESS EXCLUSIVE MODE;
    TRUNCATE kb.collection_term_stats, kb.collection_stats, kb.term_postings;
    INSERT INTO kb.collection_stats (collection, chunk_count, total_lexemes)
    SELECT c.collection, count(*), coalesce(sum(length(c.tsv)), 0)
      FROM kb.chunks c
     GROUP BY c.collection
     ORDER BY c.collection;
    SELECT coalesce(sum(s.chunk_count), 0), array_agg(s.collection ORDER BY s.collection)
      INTO n_chunks, names
      FROM kb.collection_stats s;
    -- df per lexeme and collection: ts_stat counts, in C, the rows holding each word (one pass
    -- over the tsvectors; one query per collection, none filtered when there is only one)
    IF cardinality(names) = 1 THEN
        INSERT INTO kb.collection_term_stats (lexeme, collection, df)
        SELECT s.word, names[1], s.ndoc FROM ts_stat('SELECT tsv FROM kb.chunks') AS s
         ORDER BY s.word;
    ELSIF names IS NOT NULL THEN
        FOREACH name IN ARRAY names LOOP
            INSERT INTO kb.collection_term_stats (lexeme, collection, df)
            SELECT s.word, name, s.ndoc
              FROM ts_stat(format('SELECT tsv FROM kb.chunks WHERE collection = %L', name)) AS s
             ORDER BY s.word;
        END LOOP;
    END IF;
    SELECT count(DISTINCT t.lexeme) INTO n_lexemes FROM kb.collection_term_stats t;
    ALTER TABLE kb.term_postings DROP CONSTRAINT term_postings_pkey;
    -- kb.term_impacts(c.tsv) for every chunk, its expression inlined (the same values: the
    -- tests compare this path with the row-wise one); OFFSET 0 keeps the per-chunk length term
    -- in the chunks' scan instead of letting the planner recompute it for every posting
    INSERT INTO kb.term_postings (lexeme, impact, chunk_id)
    SELECT t.lexeme, (f.tf * 1.9 / (f.tf + c.k))::real, c.id
      FROM (SELECT c.id, c.tsv,
                   (0.9 * (0.25 + 0.75 * length(c.tsv) / 80.0))::float8 AS k
              FROM kb.chunks c
            OFFSET 0) c,
           unnest(c.tsv) AS t,
           LATERAL (SELECT coalesce(array_length(t.positions, 1), 1)::float8 AS tf) f
     WHERE t.lexeme IN (SELECT s.lexeme FROM kb.collection_term_stats s
                         GROUP BY s.lexeme HAVING sum(s.df) > 100);
    GET DIAGNOSTICS n_postings = ROW_COUNT;
    ALTER TABLE kb.term_postings ADD CONSTRAINT term_postings_pkey
        PRIMARY KEY (lexeme, impact, chunk_id);
    ANALYZE kb.collection_term_stats, kb.collection_stats, kb.term_postings;
    RETURN jsonb_build_object('chunks', n_chunks, 'lexemes', n_lexemes, 'postings', n_postings);
END;
$$;

COMMENT ON FUNCTION kb.rebuild_keyword_stats() IS
'Bulk path: recomputes kb.collection_term_stats, kb.collection_stats and kb.term_postings from kb.chunks set-wise (the postings index built once) and analyzes them; locks the three tables until commit. Returns the counts.';

REVOKE ALL ON FUNCTION kb.rebuild_keyword_stats() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.rebuild_keyword_stats() TO kb_writer;
    END IF;
END
$$;
