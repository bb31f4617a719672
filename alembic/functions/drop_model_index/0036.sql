-- kb.drop_model_index(model_id integer) -> jsonb
--
-- Drops the partial HNSW index embeddings_hnsw_model_<id> of one embedding model, so that a bulk
-- load writes the model's vectors without maintaining the graph row by row; kb.build_model_index
-- builds it again after the load (pgkb does both under the ingestion lock, the rebuild in a
-- finally block). While the index is missing, kb.vector_search still answers, exactly, by a
-- sequential scan of the model's rows. Returns {"index": name, "m": m, "ef_construction": ef},
-- the dropped index's build parameters when they were given explicitly (kb.vector_indexes says
-- sized_by 'setting'), so that the caller rebuilds it as it was; null when they were sized from
-- the corpus, so that the rebuild sizes it again for the corpus after the load (its record in
-- kb.vector_indexes is removed with it); NULL when the model has no index (nothing dropped). Raises PK020
-- for an unknown model id, and lock_not_available when the exclusive lock DROP INDEX takes on
-- kb.embeddings is not granted within 5 s (lock_timeout: a long transaction must not queue every
-- search behind the drop; the caller then loads row by row). EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.drop_model_index(model_id integer)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    index_name text;
    index_options text[];
    options jsonb;
    sized_by text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kb.embedding_models em WHERE em.id = model_id) THEN
        RAISE EXCEPTION 'no embedding model has id %', model_id USING ERRCODE = 'PK020';
    END IF;
    index_name := 'embeddings_hnsw_model_' || model_id;
    SELECT i.reloptions INTO index_options
      FROM pg_catalog.pg_class i
      JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
     WHERE i.relname = index_name
       AND i.relnamespace = 'kb'::pg_catalog.regnamespace
       AND x.indrelid = 'kb.embeddings'::pg_catalog.regclass;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT pg_catalog.jsonb_object_agg(pg_catalog.split_part(o, '=', 1),
                                       pg_catalog.split_part(o, '=', 2)::integer)
      INTO options
      FROM pg_catalog.unnest(index_options) AS o;
    SELECT vi.sized_by INTO sized_by FROM kb.vector_indexes vi WHERE vi.model_id = drop_model_index.model_id;
    IF coalesce(sized_by, 'setting') = 'corpus' THEN
        options := '{}'::jsonb;
    END IF;
    EXECUTE format('DROP INDEX kb.%I', index_name);
    DELETE FROM kb.vector_indexes vi WHERE vi.model_id = drop_model_index.model_id;
    RETURN pg_catalog.jsonb_build_object(
        'index', index_name,
        'm', options -> 'm',
        'ef_construction', options -> 'ef_construction');
END;
$$;

COMMENT ON FUNCTION kb.drop_model_index(integer) IS
'Drops the partial HNSW index of one model before a bulk load (waits at most 5 s for the lock); returns its name and, when they were given explicitly rather than sized from the corpus, its build parameters for kb.build_model_index; NULL when it had none.';

REVOKE ALL ON FUNCTION kb.drop_model_index(integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.drop_model_index(integer) TO kb_writer;
    END IF;
END
$$;
