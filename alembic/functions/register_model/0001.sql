-- kb.register_model(model_name text, model_dims integer, model_provider text) -> integer
--
-- Registers an embedding model (name + dimensions = one vector space) and returns its id.
-- Idempotent: an already registered (name, dims) returns the existing id. Creates the model's
-- partial HNSW cosine index on kb.embeddings,
--     ((embedding::vector(dims)) vector_cosine_ops) WHERE model_id = id,
-- (pgvector indexes at most 2,000 dimensions; larger models are searched exactly, with a NOTICE).
-- The first model registered becomes the active one (see kb.activate_model).
CREATE OR REPLACE FUNCTION kb.register_model(model_name text, model_dims integer, model_provider text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    model_id integer;
BEGIN
    IF model_name IS NULL OR btrim(model_name) = '' THEN
        RAISE EXCEPTION 'model name must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF model_dims IS NULL OR model_dims < 1 OR model_dims > 16000 THEN
        RAISE EXCEPTION 'model dims must be between 1 and 16000, got %', model_dims
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    INSERT INTO kb.embedding_models (name, dims, provider, is_active)
    VALUES (model_name, model_dims, coalesce(model_provider, 'unknown'),
            NOT EXISTS (SELECT 1 FROM kb.embedding_models WHERE is_active))
    ON CONFLICT (name, dims) DO NOTHING;

    SELECT m.id INTO model_id
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims;

    IF model_dims <= 2000 THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON kb.embeddings USING hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) WHERE model_id = %s',
            'embeddings_hnsw_model_' || model_id, model_dims, model_id);
    ELSE
        RAISE NOTICE 'model % has % dimensions; HNSW indexes at most 2000, searches will be exact',
            model_name, model_dims;
    END IF;
    RETURN model_id;
END;
$$;

COMMENT ON FUNCTION kb.register_model(text, integer, text) IS
'Registers an embedding model (name, dims, provider), creates its partial HNSW cosine index, returns its id; the first model becomes active.';
