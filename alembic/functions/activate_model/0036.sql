-- kb.activate_model(model_name text, model_dims integer) -> integer
--
-- Makes the registered model (model_name, model_dims) the active one, atomically: queries that
-- do not name a model use the active model's embeddings from the moment this commits. Used to
-- switch to a new model after all chunks were embedded with it beside the old one
-- (pgkb models reembed), and to switch back. Refuses (PK013) while some chunks have no
-- embedding of the model, naming how many: a search through it would silently miss them.
-- Returns the model id; raises PK010 when the model is not registered. EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.activate_model(model_name text, model_dims integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target integer;
    missing bigint;
BEGIN
    SELECT m.id INTO target
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims
       FOR UPDATE;
    IF target IS NULL THEN
        RAISE EXCEPTION 'embedding model % (% dims) is not registered', model_name, model_dims
            USING ERRCODE = 'PK010', HINT = 'register it with kb.register_model first';
    END IF;
    SELECT count(*) INTO missing
      FROM kb.chunks c
     WHERE NOT EXISTS (SELECT 1 FROM kb.embeddings e
                        WHERE e.chunk_id = c.id AND e.model_id = target);
    IF missing > 0 THEN
        RAISE EXCEPTION 'embedding model % (% dims) cannot be activated: % chunk(s) have no embedding of it',
            model_name, model_dims, missing
            USING ERRCODE = 'PK013',
                  HINT = format('run `pgkb models reembed --model %s` first', model_name);
    END IF;
    UPDATE kb.embedding_models SET is_active = false WHERE is_active AND id <> target;
    UPDATE kb.embedding_models SET is_active = true WHERE id = target;
    RETURN target;
END;
$$;

COMMENT ON FUNCTION kb.activate_model(text, integer) IS
'Atomically makes a registered embedding model the active one (the one searches use by default); refused while chunks lack its embeddings.';

REVOKE ALL ON FUNCTION kb.activate_model(text, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.activate_model(text, integer) TO kb_writer;
    END IF;
END
$$;
