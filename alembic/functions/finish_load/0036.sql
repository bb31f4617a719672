-- kb.finish_load(changed_chunks bigint DEFAULT NULL) -> jsonb
--
-- What a load (an ingest, a re-embedding, a bulk COPY) calls once its writes are committed, so
-- the first searches after it are planned and run as the later ones:
--   1. the GIN index on kb.chunks.tsv merges its pending list (gin_clean_pending_list: rows
--      written since the last merge sit in a list every keyword search reads in full until
--      VACUUM, autovacuum or a full list merges them);
--   2. ANALYZE of the kb tables the planner reads for searches and the catalogue (documents,
--      chunks, embeddings, the keyword statistics and postings, relations and links): every one
--      that was never analyzed (its row estimate is unknown, -1, after its first load or a
--      rebuild), and all of them when changed_chunks (the chunks the load wrote or deleted) is
--      NULL or at least a tenth of the chunks stored (autovacuum's own threshold, without its
--      wait of up to a minute).
-- Returns {"pending_pages": n, "analyzed": [table names]}. Takes the locks ANALYZE takes (it
-- does not block reads or writes). EXECUTE for kb_writer (SECURITY DEFINER: ANALYZE and the
-- merge need the tables' owner).
CREATE OR REPLACE FUNCTION kb.finish_load(changed_chunks bigint DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pages bigint;
    stored bigint;
    everything boolean;
    tables text[];
    name text;
BEGIN
    pages := gin_clean_pending_list('kb.chunks_tsv_idx'::regclass);
    SELECT coalesce(sum(s.chunk_count), 0) INTO stored FROM kb.collection_stats s;
    everything := changed_chunks IS NULL OR changed_chunks * 10 >= stored;
    SELECT array_agg(c.relname::text ORDER BY c.relname) INTO tables
      FROM pg_class c
     WHERE c.relnamespace = 'kb'::regnamespace
       AND c.relkind = 'r'
       AND c.relname IN ('documents', 'chunks', 'embeddings', 'collection_term_stats',
                         'collection_stats', 'term_postings', 'document_relations',
                         'document_links')
       AND (everything OR c.reltuples < 0);
    FOREACH name IN ARRAY coalesce(tables, '{}') LOOP
        EXECUTE format('ANALYZE kb.%I', name);
    END LOOP;
    RETURN jsonb_build_object('pending_pages', pages, 'analyzed', to_jsonb(coalesce(tables, '{}')));
END;
$$;

COMMENT ON FUNCTION kb.finish_load(bigint) IS
'After a load: merges the GIN pending list and analyzes the kb tables never analyzed, or all of them when changed_chunks is NULL or at least a tenth of the chunks. Returns what it did.';

REVOKE ALL ON FUNCTION kb.finish_load(bigint) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.finish_load(bigint) TO kb_writer;
    END IF;
END
$$;
