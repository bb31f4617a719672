-- kb.build_model_index(model_id integer, hnsw_m integer DEFAULT NULL,
--                      hnsw_ef_construction integer DEFAULT NULL) -> text
--
-- Creates, if it does not exist, the partial HNSW cosine index of one embedding model:
--     embeddings_hnsw_model_<id> ON kb.embeddings USING hnsw
--         ((embedding::vector(dims)) vector_cosine_ops) WITH (m, ef_construction)
--         WHERE model_id = <id>
-- hnsw_m (2..100) and hnsw_ef_construction (4..1000, at least 2 * m): HNSW build parameters;
-- NULL = pgvector's defaults (16, 64). Returns the index name, or NULL for a model of more than
-- 2,000 dimensions (pgvector indexes at most 2,000; such a model is searched exactly, with a
-- NOTICE). Used by kb.register_model, and after a bulk load that dropped the index. Raises PK020 for
-- an unknown model id, PK001 for out-of-range parameters. EXECUTE for kb_writer only.
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
    options text := '';
BEGIN
    SELECT em.id, em.name, em.dims INTO m FROM kb.embedding_models em WHERE em.id = model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no embedding model has id %', model_id USING ERRCODE = 'PK020';
    END IF;
    IF hnsw_m IS NOT NULL AND (hnsw_m < 2 OR hnsw_m > 100) THEN
        RAISE EXCEPTION 'hnsw_m must be between 2 and 100, got %', hnsw_m
            USING ERRCODE = 'PK001';
    END IF;
    IF hnsw_ef_construction IS NOT NULL AND (hnsw_ef_construction < 4
            OR hnsw_ef_construction > 1000
            OR hnsw_ef_construction < 2 * coalesce(hnsw_m, 16)) THEN
        RAISE EXCEPTION 'hnsw_ef_construction must be between 4 and 1000 and at least 2 * m (%), got %',
            2 * coalesce(hnsw_m, 16), hnsw_ef_construction
            USING ERRCODE = 'PK001';
    END IF;
    IF m.dims > 2000 THEN
        RAISE NOTICE 'model % has % dimensions; HNSW indexes at most 2000, searches will be exact',
            m.name, m.dims;
        RETURN NULL;
    END IF;
    index_name := 'embeddings_hnsw_model_' || m.id;
    IF hnsw_m IS NOT NULL THEN
        options := format('m = %s', hnsw_m);
    END IF;
    IF hnsw_ef_construction IS NOT NULL THEN
        options := options || CASE WHEN options = '' THEN '' ELSE ', ' END
                   || format('ef_construction = %s', hnsw_ef_construction);
    END IF;
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON kb.embeddings USING hnsw '
        '((embedding::public.vector(%s)) public.vector_cosine_ops)%s WHERE model_id = %s',
        index_name, m.dims,
        CASE WHEN options = '' THEN '' ELSE ' WITH (' || options || ')' END, m.id);
    RETURN index_name;
END;
$$;

COMMENT ON FUNCTION kb.build_model_index(integer, integer, integer) IS
'Creates (if missing) the partial HNSW cosine index embeddings_hnsw_model_<id> of one model, with optional m and ef_construction; returns its name (NULL above 2,000 dims).';

REVOKE ALL ON FUNCTION kb.build_model_index(integer, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.build_model_index(integer, integer, integer) TO kb_writer;
    END IF;
END
$$;
