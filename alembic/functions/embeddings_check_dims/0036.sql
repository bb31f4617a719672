-- kb.embeddings_check_dims(): row trigger on kb.embeddings (BEFORE INSERT OR UPDATE).
--
-- Refuses an embedding whose dimension differs from the dimension registered for its model in
-- kb.embedding_models, so that no vector can ever sit beside vectors of another shape in the
-- same model's space. Returns NEW when the dimensions agree; raises PK012 otherwise.
CREATE OR REPLACE FUNCTION kb.embeddings_check_dims()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    expected integer;
    model_name text;
BEGIN
    SELECT m.dims, m.name INTO expected, model_name
      FROM kb.embedding_models m
     WHERE m.id = NEW.model_id;
    IF expected IS NOT NULL AND public.vector_dims(NEW.embedding) <> expected THEN
        RAISE EXCEPTION 'embedding for chunk % has % dimensions, but model % (id %) has %',
            NEW.chunk_id, public.vector_dims(NEW.embedding), model_name, NEW.model_id, expected
            USING ERRCODE = 'PK012',
                  HINT = 'embed with the registered model, or register the new model first';
    END IF;
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION kb.embeddings_check_dims() IS
'Trigger: rejects an embedding whose dimension differs from its model''s registered dims.';
