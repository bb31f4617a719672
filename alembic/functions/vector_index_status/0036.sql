-- kb.vector_index_status()
--   -> TABLE (model text, dims integer, is_active boolean, index_name text, m integer,
--             ef_construction integer, ef_search integer, built_for bigint, sized_by text,
--             built_at timestamptz, tier_now text)
--
-- What each model's HNSW index was built with (kb.vector_indexes, written by
-- kb.build_model_index): m, ef_construction, the ef_search searches use for it, the number of
-- the model's embeddings it was sized for (built_for), whether the parameters were sized from
-- that count ('corpus') or given ('setting'), when it was built, and tier_now: the tier
-- kb.hnsw_parameters gives for the number of embeddings it was built for (what
-- kb.resize_model_index compares, with today's count, to decide a rebuild). A model without an
-- index (more than 2,000 dimensions, or a bulk load in progress) has NULL index columns. One row
-- per model, the active one first. SECURITY DEFINER, EXECUTE for kb_writer only (what
-- `pgkb db status` shows the owner and the writers; a reader is not told how many embeddings
-- the whole database held, its other collections' included).
CREATE OR REPLACE FUNCTION kb.vector_index_status()
RETURNS TABLE (
    model text,
    dims integer,
    is_active boolean,
    index_name text,
    m integer,
    ef_construction integer,
    ef_search integer,
    built_for bigint,
    sized_by text,
    built_at timestamptz,
    tier_now text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT em.name, em.dims, em.is_active, vi.index_name, vi.m, vi.ef_construction, vi.ef_search,
           vi.embedding_count, vi.sized_by, vi.built_at,
           CASE WHEN vi.model_id IS NOT NULL THEN (kb.hnsw_parameters(vi.embedding_count)).tier END
      FROM kb.embedding_models em
      LEFT JOIN kb.vector_indexes vi
        ON vi.model_id = em.id
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_class i
                    WHERE i.relname = vi.index_name
                      AND i.relnamespace = 'kb'::pg_catalog.regnamespace)
     ORDER BY em.is_active DESC, em.id;
$$;

COMMENT ON FUNCTION kb.vector_index_status() IS
'Each model''s HNSW index as built: m, ef_construction, the ef_search searches use, the embeddings it was sized for, sized_by (corpus or setting), built_at and the size tier; the active model first.';

REVOKE ALL ON FUNCTION kb.vector_index_status() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.vector_index_status() TO kb_writer;
    END IF;
END
$$;
