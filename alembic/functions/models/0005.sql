-- kb.models() -> TABLE (id integer, name text, dims integer, provider text, is_active boolean,
--                       config jsonb, created_at timestamptz, embeddings bigint, missing bigint,
--                       wrong_dims bigint, index_name text, index_valid boolean)
--
-- Every registered embedding model with its coverage: embeddings = vectors stored for it,
-- missing = chunks without one (0 means it may be activated), wrong_dims = stored vectors whose
-- dimension differs from the declared dims (always 0 while the trigger kb.embeddings_check_dims
-- guards inserts), index_name / index_valid = its partial HNSW index (NULL when it has none, e.g.
-- above 2,000 dims or dropped for a bulk load). Ordered by id. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.models()
RETURNS TABLE (
    id integer,
    name text,
    dims integer,
    provider text,
    is_active boolean,
    config jsonb,
    created_at timestamptz,
    embeddings bigint,
    missing bigint,
    wrong_dims bigint,
    index_name text,
    index_valid boolean)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH counts AS (
        SELECT e.model_id, count(*) AS n,
               count(*) FILTER (WHERE public.vector_dims(e.embedding) <> m.dims) AS bad
          FROM kb.embeddings e
          JOIN kb.embedding_models m ON m.id = e.model_id
         GROUP BY e.model_id
    ),
    total AS (SELECT count(*) AS n FROM kb.chunks)
    SELECT m.id, m.name, m.dims, m.provider, m.is_active, m.config, m.created_at,
           coalesce(c.n, 0), t.n - coalesce(c.n, 0), coalesce(c.bad, 0),
           i.relname::text, x.indisvalid
      FROM kb.embedding_models m
      CROSS JOIN total t
      LEFT JOIN counts c ON c.model_id = m.id
      LEFT JOIN pg_catalog.pg_class i
             ON i.relname = 'embeddings_hnsw_model_' || m.id
            AND i.relnamespace = 'kb'::regnamespace
      LEFT JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
     ORDER BY m.id;
$$;

COMMENT ON FUNCTION kb.models() IS
'Registered embedding models with their coverage (embeddings, missing chunks, wrong-dims vectors) and the state of their HNSW index.';

REVOKE ALL ON FUNCTION kb.models() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.models() TO kb_writer;
    END IF;
END
$$;
