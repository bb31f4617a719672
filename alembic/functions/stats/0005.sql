-- kb.stats(last_runs integer DEFAULT 5) -> jsonb
--
-- What the knowledge base holds, as one JSON object (what `pgkb stats` prints):
--   documents, chunks, relations        row counts
--   active_model                        {id, name, dims, provider} or null
--   models                              [{id, name, dims, provider, is_active, embeddings,
--                                         missing}] (see kb.models)
--   categories                          [{category (null = none), documents, chunks,
--                                         oldest_update, newest_update}] by documents desc
--   tables                              [{name, rows, total_bytes, table_bytes, index_bytes}]
--   indexes                             [{name, table, bytes, valid}]
--   total_bytes                         sum of the kb tables' total sizes (with indexes, TOAST)
--   last_runs                           the last_runs newest rows of kb.ingest_runs, newest first
-- Reads only (STABLE). EXECUTE for kb_writer (and the owner), not for kb_reader.
CREATE OR REPLACE FUNCTION kb.stats(last_runs integer DEFAULT 5)
RETURNS jsonb
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'documents', (SELECT count(*) FROM kb.documents),
        'chunks', (SELECT count(*) FROM kb.chunks),
        'relations', (SELECT count(*) FROM kb.document_relations),
        'active_model', (SELECT pg_catalog.to_jsonb(a) FROM kb.active_model() a),
        'models', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'id', m.id, 'name', m.name, 'dims', m.dims, 'provider', m.provider,
                       'is_active', m.is_active, 'embeddings', m.embeddings,
                       'missing', m.missing) ORDER BY m.id)
              FROM kb.models() m), '[]'::jsonb),
        'categories', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'category', g.category, 'documents', g.documents, 'chunks', g.chunks,
                       'oldest_update', g.oldest, 'newest_update', g.newest)
                       ORDER BY g.documents DESC, g.category NULLS LAST)
              FROM (SELECT d.category, count(*) AS documents,
                           sum((SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id))
                               AS chunks,
                           min(d.updated_at) AS oldest, max(d.updated_at) AS newest
                      FROM kb.documents d
                     GROUP BY d.category) g), '[]'::jsonb),
        'tables', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'name', c.relname, 'rows', greatest(c.reltuples, 0)::bigint,
                       'total_bytes', pg_catalog.pg_total_relation_size(c.oid),
                       'table_bytes', pg_catalog.pg_table_size(c.oid),
                       'index_bytes', pg_catalog.pg_indexes_size(c.oid)) ORDER BY c.relname)
              FROM pg_catalog.pg_class c
             WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'), '[]'::jsonb),
        'indexes', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'name', i.relname, 'table', t.relname,
                       'bytes', pg_catalog.pg_relation_size(i.oid),
                       'valid', x.indisvalid) ORDER BY t.relname, i.relname)
              FROM pg_catalog.pg_index x
              JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
              JOIN pg_catalog.pg_class t ON t.oid = x.indrelid
             WHERE t.relnamespace = 'kb'::regnamespace), '[]'::jsonb),
        'total_bytes', (
            SELECT coalesce(sum(pg_catalog.pg_total_relation_size(c.oid)), 0)::bigint
              FROM pg_catalog.pg_class c
             WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'),
        'last_runs', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(r) ORDER BY r.id DESC)
              FROM (SELECT * FROM kb.ingest_runs ir
                     ORDER BY ir.id DESC
                     LIMIT greatest(coalesce(last_runs, 5), 0)) r), '[]'::jsonb));
$$;

COMMENT ON FUNCTION kb.stats(integer) IS
'What the knowledge base holds as JSON: counts, models and coverage, categories with oldest/newest update, table and index sizes, the active model, the last ingestion runs.';

REVOKE ALL ON FUNCTION kb.stats(integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.stats(integer) TO kb_writer;
    END IF;
END
$$;
