-- kb.resize_model_index(model_id integer) -> jsonb
--
-- Builds a model's HNSW index again when the parameters kb.hnsw_parameters gives for the number
-- of its embeddings now differ from those it was built with (its kb.vector_indexes record): a
-- corpus that grew past a tier threshold gets the denser graph, one that shrank below it the
-- faster build. Only an index sized from the corpus is resized; one built with explicit
-- parameters (sized_by 'setting') is left as it is, as is a model with no index (a bulk load in
-- progress, or above 2,000 dimensions). The rebuild drops the index and creates it (in this
-- transaction: writes to kb.embeddings wait, searches through the model are exact meanwhile).
-- Returns {"index", "resized": bool, "embeddings", "m", "ef_construction", "ef_search",
-- "previous": {"m", "ef_construction", "ef_search"} or null}; NULL when the model has no index.
-- Called by `pgkb db reindex` and `pgkb models activate`. Raises PK020 for an unknown model id.
-- EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.resize_model_index(model_id integer)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    recorded record;
    wanted record;
    n_embeddings bigint;
    previous jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kb.embedding_models em WHERE em.id = resize_model_index.model_id) THEN
        RAISE EXCEPTION 'no embedding model has id %', resize_model_index.model_id USING ERRCODE = 'PK020';
    END IF;
    SELECT vi.* INTO recorded FROM kb.vector_indexes vi WHERE vi.model_id = resize_model_index.model_id;
    IF NOT FOUND OR NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_class i
             WHERE i.relname = recorded.index_name
               AND i.relnamespace = 'kb'::pg_catalog.regnamespace) THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO n_embeddings FROM kb.embeddings e WHERE e.model_id = resize_model_index.model_id;
    wanted := kb.hnsw_parameters(n_embeddings);
    previous := jsonb_build_object('m', recorded.m, 'ef_construction', recorded.ef_construction,
                                   'ef_search', recorded.ef_search);
    IF recorded.sized_by <> 'corpus'
       OR (recorded.m = wanted.m AND recorded.ef_construction = wanted.ef_construction) THEN
        UPDATE kb.vector_indexes vi SET embedding_count = n_embeddings
         WHERE vi.model_id = resize_model_index.model_id;
        RETURN jsonb_build_object('index', recorded.index_name, 'resized', false,
                                  'embeddings', n_embeddings, 'm', recorded.m,
                                  'ef_construction', recorded.ef_construction,
                                  'ef_search', recorded.ef_search, 'previous', NULL);
    END IF;
    EXECUTE format('DROP INDEX kb.%I', recorded.index_name);
    PERFORM kb.build_model_index(resize_model_index.model_id);
    RETURN jsonb_build_object('index', recorded.index_name, 'resized', true,
                              'embeddings', n_embeddings, 'm', wanted.m,
                              'ef_construction', wanted.ef_construction,
                              'ef_search', wanted.ef_search, 'previous', previous);
END;
$$;

COMMENT ON FUNCTION kb.resize_model_index(integer) IS
'Rebuilds a model''s HNSW index (sized from the corpus) when kb.hnsw_parameters gives other parameters for its embeddings now; returns what it did as jsonb (resized, embeddings, m, ef_construction, ef_search, previous), NULL without an index.';

REVOKE ALL ON FUNCTION kb.resize_model_index(integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.resize_model_index(integer) TO kb_writer;
    END IF;
END
$$;
