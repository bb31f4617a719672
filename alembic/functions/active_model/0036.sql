-- kb.active_model() -> (id integer, name text, dims integer, provider text)
--
-- The active embedding model: the one whose vectors searches compare a query with when they are
-- not given a model. Returns no row before any model is registered. SECURITY DEFINER, EXECUTE
-- for kb_reader and kb_writer: a service searching in SQL learns which model to embed its query
-- with (and pgkb serve's /v1/embeddings answers with it).
CREATE OR REPLACE FUNCTION kb.active_model()
RETURNS TABLE (id integer, name text, dims integer, provider text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.id, m.name, m.dims, m.provider
      FROM kb.embedding_models m
     WHERE m.is_active;
$$;

COMMENT ON FUNCTION kb.active_model() IS
'The active embedding model (id, name, dims, provider); no row before one is registered.';

REVOKE ALL ON FUNCTION kb.active_model() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.active_model() TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.active_model() TO kb_writer;
    END IF;
END
$$;
