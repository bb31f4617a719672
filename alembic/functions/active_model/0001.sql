-- kb.active_model() -> (id integer, name text, dims integer, provider text)
--
-- The active embedding model: the one whose vectors searches compare a query with when they are
-- not given a model. Returns no row before any model is registered.
CREATE OR REPLACE FUNCTION kb.active_model()
RETURNS TABLE (id integer, name text, dims integer, provider text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = kb, public, pg_temp
AS $$
    SELECT m.id, m.name, m.dims, m.provider
      FROM kb.embedding_models m
     WHERE m.is_active;
$$;

COMMENT ON FUNCTION kb.active_model() IS
'The active embedding model (id, name, dims, provider); no row before one is registered.';
