-- kb.collection_readable(collection text) -> boolean
--
-- Whether a read may see documents of `collection`: it is within kb.collection_scope(NULL) (the
-- session's login role's grants, narrowed by the session setting pgkb.collections). The check
-- the single-document reader functions (kb.read_document, kb.neighbor_chunks, kb.show_document,
-- ...) and the row-level security policies of the kb tables apply. false for NULL. Reads only
-- (STABLE).
CREATE OR REPLACE FUNCTION kb.collection_readable(collection text)
RETURNS boolean
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT collection_readable.collection IS NOT NULL
       AND coalesce(collection_readable.collection = ANY (r.names), true)
      FROM (SELECT kb.collection_scope(NULL) AS names) r;
$$;

COMMENT ON FUNCTION kb.collection_readable(text) IS
'Whether a read may see documents of the collection: within kb.collection_scope(NULL), the caller''s grants narrowed by the session''s collections; false for NULL.';

REVOKE ALL ON FUNCTION kb.collection_readable(text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_readable(text) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_readable(text) TO kb_writer;
    END IF;
END
$$;
