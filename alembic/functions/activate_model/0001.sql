-- kb.activate_model(model_name text, model_dims integer) -> integer
--
-- Makes the registered model (model_name, model_dims) the active one, atomically: queries that
-- do not name a model use the active model's embeddings from the moment this commits. Used to
-- switch to a new model after all chunks were embedded with it beside the old one, and to switch
-- back. Returns the model id; raises when the model is not registered.
CREATE OR REPLACE FUNCTION kb.activate_model(model_name text, model_dims integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    target integer;
BEGIN
    SELECT m.id INTO target
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims
       FOR UPDATE;
    IF target IS NULL THEN
        RAISE EXCEPTION 'embedding model % (% dims) is not registered', model_name, model_dims
            USING ERRCODE = 'no_data_found', HINT = 'register it with kb.register_model first';
    END IF;
    UPDATE kb.embedding_models SET is_active = false WHERE is_active AND id <> target;
    UPDATE kb.embedding_models SET is_active = true WHERE id = target;
    RETURN target;
END;
$$;

COMMENT ON FUNCTION kb.activate_model(text, integer) IS
'Atomically makes a registered embedding model the active one (the one searches use by default).';
