-- kb.register_model(model_name text, model_dims integer, model_provider text,
--                   model_config jsonb DEFAULT '{}', hnsw_m integer DEFAULT NULL,
--                   hnsw_ef_construction integer DEFAULT NULL) -> integer
--
-- Registers an embedding model (name + dimensions = one vector space) and returns its id.
-- Idempotent: an already registered (name, dims) returns the existing id (its config is kept).
-- model_config holds what pgkb needs to embed with it again (e.g. {"base_url": ...,
-- "max_input_tokens": 8191}; never an API key). Creates the model's partial HNSW cosine index
-- through kb.build_model_index (hnsw_m, hnsw_ef_construction: HNSW build parameters, NULL =
-- pgvector's defaults 16 and 64). The first model registered becomes the active one (see
-- kb.activate_model). SECURITY DEFINER so the kb_writer role (which does not own kb.embeddings)
-- can register a model; EXECUTE only for kb_writer, never PUBLIC.
CREATE OR REPLACE FUNCTION kb.register_model(
    model_name text,
    model_dims integer,
    model_provider text,
    model_config jsonb DEFAULT '{}'::jsonb,
    hnsw_m integer DEFAULT NULL,
    hnsw_ef_construction integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    model_id integer;
BEGIN
    IF model_name IS NULL OR btrim(model_name) = '' THEN
        RAISE EXCEPTION 'model name must not be empty' USING ERRCODE = 'PK001';
    END IF;
    IF model_dims IS NULL OR model_dims < 1 OR model_dims > 16000 THEN
        RAISE EXCEPTION 'model dims must be between 1 and 16000, got %', model_dims
            USING ERRCODE = 'PK001';
    END IF;
    IF model_config IS NULL OR jsonb_typeof(model_config) <> 'object' THEN
        RAISE EXCEPTION 'model config must be a JSON object, got %', model_config
            USING ERRCODE = 'PK001';
    END IF;

    INSERT INTO kb.embedding_models (name, dims, provider, is_active, config)
    VALUES (model_name, model_dims, coalesce(model_provider, 'unknown'),
            NOT EXISTS (SELECT 1 FROM kb.embedding_models WHERE is_active), model_config)
    ON CONFLICT (name, dims) DO NOTHING;

    SELECT m.id INTO model_id
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims;

    PERFORM kb.build_model_index(model_id, hnsw_m, hnsw_ef_construction);
    RETURN model_id;
END;
$$;

COMMENT ON FUNCTION kb.register_model(text, integer, text, jsonb, integer, integer) IS
'Registers an embedding model (name, dims, provider, config), creates its partial HNSW cosine index (optional m, ef_construction), returns its id; the first model becomes active.';

REVOKE ALL ON FUNCTION kb.register_model(text, integer, text, jsonb, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.register_model(text, integer, text, jsonb, integer, integer) TO kb_writer;
    END IF;
END
$$;
