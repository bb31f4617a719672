-- kb.build_model_index(model_id integer, hnsw_m integer DEFAULT NULL,
--                      hnsw_ef_construction integer DEFAULT NULL) -> text
--
-- Creates, if it does not exist, the partial HNSW cosine index of one embedding model:
--     embeddings_hnsw_model_<id> ON kb.embeddings USING hnsw
--         ((embedding::vector(dims)) vector_cosine_ops) WITH (m, ef_construction)
--         WHERE model_id = <id>
-- and records what it was built with in kb.vector_indexes (m, ef_construction, the ef_search
-- kb.vector_search uses for it, the model's embeddings at that moment, sized_by). With
-- hnsw_m and hnsw_ef_construction NULL the parameters come from the number of the model's
-- embeddings now (kb.hnsw_parameters, sized_by 'corpus'); given, they are used as they are
-- (hnsw_m 2..100, hnsw_ef_construction 4..1000 and at least 2 * m; the other one, when NULL,
-- from the corpus; sized_by 'setting'). The recorded ef_search is the corpus tier's either way.
-- Returns the index name, or NULL for a model of more than 2,000 dimensions (pgvector indexes
-- at most 2,000; such a model is searched exactly, with a NOTICE). Used by kb.register_model,
-- after a bulk load that dropped the index, and by kb.resize_model_index. Raises PK020 for an
-- unknown model id, PK001 for out-of-range parameters. EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.build_model_index(
    model_id integer,
    hnsw_m integer DEFAULT NULL,
    hnsw_ef_construction integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m record;
    index_name text;
    sized record;
    n_embeddings bigint;
    chosen_m integer;
    chosen_ef integer;
BEGIN
    SELECT em.id, em.name, em.dims INTO m FROM kb.embedding_models em WHERE em.id = model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no embedding model has id %', model_id USING ERRCODE = 'PK020';
    END IF;
    IF hnsw_m IS NOT NULL AND (hnsw_m < 2 OR hnsw_m > 100) THEN
        RAISE EXCEPTION 'hnsw_m must be between 2 and 100, got %', hnsw_m
            USING ERRCODE = 'PK001';
    END IF;
    IF m.dims > 2000 THEN
        RAISE NOTICE 'model % has % dimensions; HNSW indexes at most 2000, searches will be exact',
            m.name, m.dims;
        RETURN NULL;
    END IF;
    index_name := 'embeddings_hnsw_model_' || m.id;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class i
                WHERE i.relname = index_name AND i.relnamespace = 'kb'::pg_catalog.regnamespace) THEN
        RETURN index_name;
    END IF;
    SELECT count(*) INTO n_embeddings FROM kb.embeddings e WHERE e.model_id = m.id;
    sized := kb.hnsw_parameters(n_embeddings);
    chosen_m := coalesce(hnsw_m, sized.m);
    chosen_ef := coalesce(hnsw_ef_construction, greatest(sized.ef_construction, 2 * chosen_m));
    IF chosen_ef < 4 OR chosen_ef > 1000 OR chosen_ef < 2 * chosen_m THEN
        RAISE EXCEPTION 'hnsw_ef_construction must be between 4 and 1000 and at least 2 * m (%), got %',
            2 * chosen_m, chosen_ef
            USING ERRCODE = 'PK001';
    END IF;
    EXECUTE format(
        'CREATE INDEX %I ON kb.embeddings USING hnsw '
        '((embedding::public.vector(%s)) public.vector_cosine_ops) '
        'WITH (m = %s, ef_construction = %s) WHERE model_id = %s',
        index_name, m.dims, chosen_m, chosen_ef, m.id);
    INSERT INTO kb.vector_indexes AS vi (model_id, index_name, m, ef_construction, ef_search,
                                         embedding_count, sized_by, built_at)
    VALUES (m.id, index_name, chosen_m, chosen_ef, sized.ef_search, n_embeddings,
            CASE WHEN hnsw_m IS NULL AND hnsw_ef_construction IS NULL THEN 'corpus' ELSE 'setting' END,
            now())
    ON CONFLICT ON CONSTRAINT vector_indexes_pkey DO UPDATE
       SET index_name = EXCLUDED.index_name, m = EXCLUDED.m,
           ef_construction = EXCLUDED.ef_construction, ef_search = EXCLUDED.ef_search,
           embedding_count = EXCLUDED.embedding_count, sized_by = EXCLUDED.sized_by,
           built_at = EXCLUDED.built_at;
    RETURN index_name;
END;
$$;

COMMENT ON FUNCTION kb.build_model_index(integer, integer, integer) IS
'Creates (if missing) the partial HNSW cosine index embeddings_hnsw_model_<id> of one model, its m and ef_construction given or (NULL) sized from the model''s embeddings by kb.hnsw_parameters, and records them in kb.vector_indexes; returns its name (NULL above 2,000 dims).';

REVOKE ALL ON FUNCTION kb.build_model_index(integer, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.build_model_index(integer, integer, integer) TO kb_writer;
    END IF;
END
$$;
