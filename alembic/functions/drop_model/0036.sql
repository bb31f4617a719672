-- kb.drop_model(model_name text, model_dims integer DEFAULT NULL) -> bigint
--
-- Removes a registered embedding model: its row in kb.embedding_models, all its embeddings
-- (ON DELETE CASCADE) and its partial HNSW index embeddings_hnsw_model_<id>. model_dims NULL
-- matches the model by name alone (an error when two registrations share the name). Refuses the
-- active model (PK014): activate another one first. Returns the
-- number of embeddings removed. Owner only (EXECUTE revoked from PUBLIC, granted to nobody).
CREATE OR REPLACE FUNCTION kb.drop_model(model_name text, model_dims integer DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m record;
    found_count integer;
    removed bigint;
BEGIN
    SELECT count(*) INTO found_count
      FROM kb.embedding_models em
     WHERE em.name = model_name AND (model_dims IS NULL OR em.dims = model_dims);
    IF found_count = 0 THEN
        RAISE EXCEPTION 'embedding model % is not registered', quote_literal(model_name)
            USING ERRCODE = 'PK010', HINT = 'pgkb models list shows the registered models';
    ELSIF found_count > 1 THEN
        RAISE EXCEPTION 'embedding model % is registered with several dimensions; name the dims',
            quote_literal(model_name) USING ERRCODE = 'PK001';
    END IF;
    SELECT em.id, em.name, em.dims, em.is_active INTO m
      FROM kb.embedding_models em
     WHERE em.name = model_name AND (model_dims IS NULL OR em.dims = model_dims)
       FOR UPDATE;
    IF m.is_active THEN
        RAISE EXCEPTION 'embedding model % (% dims) is the active model and cannot be dropped',
            m.name, m.dims
            USING ERRCODE = 'PK014',
                  HINT = 'activate another model first (pgkb models activate NAME)';
    END IF;
    SELECT count(*) INTO removed FROM kb.embeddings e WHERE e.model_id = m.id;
    EXECUTE format('DROP INDEX IF EXISTS kb.%I', 'embeddings_hnsw_model_' || m.id);
    DELETE FROM kb.embedding_models em WHERE em.id = m.id;
    RETURN removed;
END;
$$;

COMMENT ON FUNCTION kb.drop_model(text, integer) IS
'Removes a non-active embedding model with its embeddings and its HNSW index; returns the number of embeddings removed.';

REVOKE ALL ON FUNCTION kb.drop_model(text, integer) FROM PUBLIC;
