-- kb.stats(last_runs integer DEFAULT 5, filters jsonb DEFAULT '{}') -> jsonb
--
-- What the knowledge base holds, as one JSON object (what `pgkb stats` prints):
--   documents, chunks, relations        row counts
--   active_model                        {id, name, dims, provider} or null
--   models                              [{id, name, dims, provider, is_active, embeddings,
--                                         missing}] (see kb.models)
--   collections                         [{collection, documents, chunks}] by name
--   categories                          [{category (null = none), documents, chunks,
--                                         oldest_update, newest_update}] by documents desc
--   whole_database                      true when the caller reads every collection (the
--                                       whole-database figures below are filled), else false
--   tables                              [{name, rows, total_bytes, table_bytes, index_bytes}]:
--                                       rows is the planner's estimate (pg_class.reltuples),
--                                       counted exactly for a table never analyzed
--   indexes                             [{name, table, bytes, valid}]
--   total_bytes                         sum of the kb tables' total sizes (with indexes, TOAST)
--   last_runs                           the last_runs newest rows of kb.ingest_runs, newest first
-- The counts, collections and categories cover the documents within filters (kb.search_filters:
-- category, metadata, source, collections), which never reach past the caller's collections.
-- A caller who may not read every collection (kb.readable_collections) gets no whole-database
-- figures: models, tables, indexes, total_bytes and last_runs are empty for it (they would count
-- or name documents of collections it cannot read). Reads only (STABLE). SECURITY DEFINER,
-- EXECUTE for kb_writer and kb_reader (pgkb stats as either role); it shows counts, sizes and
-- the run log, never document text. A bad filters object raises PK001 (invalid argument).
CREATE OR REPLACE FUNCTION kb.stats(last_runs integer DEFAULT 5, filters jsonb DEFAULT '{}'::jsonb)
RETURNS jsonb
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH f AS (SELECT * FROM kb.search_filters(stats.filters)),
    whole AS (SELECT kb.readable_collections() IS NULL AS ok),
    docs AS (
        SELECT d.id, d.category, d.collection, d.updated_at,
               (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id) AS chunks
          FROM kb.documents d, f
         WHERE (f.category IS NULL OR d.category = ANY (f.category))
           AND (f.metadata IS NULL OR d.metadata @> f.metadata)
           AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
           AND (f.collections IS NULL OR d.collection = ANY (f.collections))
    )
    SELECT pg_catalog.jsonb_build_object(
        'documents', (SELECT count(*) FROM docs),
        'chunks', (SELECT coalesce(sum(docs.chunks), 0)::bigint FROM docs),
        -- both ends within filters, joined from the relations (a join with docs, whose size
        -- the planner cannot estimate, became a nested loop of documents x documents)
        'relations', (SELECT count(*)
                        FROM kb.document_relations r
                        JOIN kb.documents s ON s.id = r.source_id
                        JOIN kb.documents t ON t.id = r.target_id, f
                       WHERE (f.category IS NULL
                              OR (s.category = ANY (f.category) AND t.category = ANY (f.category)))
                         AND (f.metadata IS NULL
                              OR (s.metadata @> f.metadata AND t.metadata @> f.metadata))
                         AND (f.source_pattern IS NULL
                              OR (s.source_uri LIKE f.source_pattern
                                  AND t.source_uri LIKE f.source_pattern))
                         AND (f.collections IS NULL
                              OR (s.collection = ANY (f.collections)
                                  AND t.collection = ANY (f.collections)))),
        'active_model', (SELECT pg_catalog.to_jsonb(a) FROM kb.active_model() a),
        'whole_database', (SELECT whole.ok FROM whole),
        -- kb.models()' coverage counts, without its check of every vector's dimensions
        'models', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'id', m.id, 'name', m.name, 'dims', m.dims, 'provider', m.provider,
                       'is_active', m.is_active, 'embeddings', coalesce(e.n, 0),
                       'missing', (SELECT count(*) FROM kb.chunks) - coalesce(e.n, 0))
                       ORDER BY m.id)
              FROM kb.embedding_models m
              LEFT JOIN (SELECT x.model_id, count(*) AS n FROM kb.embeddings x
                          GROUP BY x.model_id) e ON e.model_id = m.id
             WHERE (SELECT whole.ok FROM whole)), '[]'::jsonb),
        'collections', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'collection', g.collection, 'documents', g.documents, 'chunks', g.chunks)
                       ORDER BY g.collection)
              FROM (SELECT docs.collection, count(*) AS documents, sum(docs.chunks) AS chunks
                      FROM docs GROUP BY docs.collection) g), '[]'::jsonb),
        'categories', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'category', g.category, 'documents', g.documents, 'chunks', g.chunks,
                       'oldest_update', g.oldest, 'newest_update', g.newest)
                       ORDER BY g.documents DESC, g.category NULLS LAST)
              FROM (SELECT docs.category, count(*) AS documents, sum(docs.chunks) AS chunks,
                           min(docs.updated_at) AS oldest, max(docs.updated_at) AS newest
                      FROM docs
                     GROUP BY docs.category) g), '[]'::jsonb),
        'tables', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'name', c.relname,
                       'rows', CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
                                    ELSE kb.table_rows(c.oid::regclass) END,
                       'total_bytes', pg_catalog.pg_total_relation_size(c.oid),
                       'table_bytes', pg_catalog.pg_table_size(c.oid),
                       'index_bytes', pg_catalog.pg_indexes_size(c.oid)) ORDER BY c.relname)
              FROM pg_catalog.pg_class c
             WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'
               AND (SELECT whole.ok FROM whole)), '[]'::jsonb),
        'indexes', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'name', i.relname, 'table', t.relname,
                       'bytes', pg_catalog.pg_relation_size(i.oid),
                       'valid', x.indisvalid) ORDER BY t.relname, i.relname)
              FROM pg_catalog.pg_index x
              JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
              JOIN pg_catalog.pg_class t ON t.oid = x.indrelid
             WHERE t.relnamespace = 'kb'::regnamespace
               AND (SELECT whole.ok FROM whole)), '[]'::jsonb),
        'total_bytes', (
            SELECT coalesce(sum(pg_catalog.pg_total_relation_size(c.oid)), 0)::bigint
              FROM pg_catalog.pg_class c
             WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'
               AND (SELECT whole.ok FROM whole)),
        'last_runs', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(r) ORDER BY r.id DESC)
              FROM (SELECT * FROM kb.ingest_runs ir
                     WHERE (SELECT whole.ok FROM whole)
                     ORDER BY ir.id DESC
                     LIMIT greatest(coalesce(last_runs, 5), 0)) r), '[]'::jsonb));
$$;

COMMENT ON FUNCTION kb.stats(integer, jsonb) IS
'What the knowledge base holds as JSON: counts, models and coverage, collections, categories with oldest/newest update, table and index sizes, the active model, the last ingestion runs; counts within filters and the caller''s collections, whole-database figures only for a caller who reads every collection.';

REVOKE ALL ON FUNCTION kb.stats(integer, jsonb) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.stats(integer, jsonb) TO kb_writer;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.stats(integer, jsonb) TO kb_reader;
    END IF;
END
$$;
