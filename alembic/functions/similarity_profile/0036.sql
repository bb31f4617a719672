-- kb.similarity_profile() -> jsonb
--
-- The corpus's similarity profile for the active embedding model (kb.settings, key
-- 'similarity_profile': the quantiles of the best similarity of random in-corpus pseudo-queries,
-- see kb.pseudo_queries), NULL when none was measured or it was measured with another model.
-- The abstention gate's relative_similarity signal reads it. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.similarity_profile()
RETURNS jsonb
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.value
      FROM kb.settings s, kb.active_model() m
     WHERE s.key = 'similarity_profile' AND s.value ->> 'model' = m.name;
$$;

COMMENT ON FUNCTION kb.similarity_profile() IS
'The similarity profile (pseudo-query quantiles) stored for the active model, NULL when none: the abstention gate''s scale for relative_similarity.';

REVOKE ALL ON FUNCTION kb.similarity_profile() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.similarity_profile() TO kb_reader;
    END IF;
END
$$;
