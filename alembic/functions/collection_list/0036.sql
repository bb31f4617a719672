-- kb.collection_list() -> TABLE (name text, description text, created_at timestamptz,
--                                documents bigint, chunks bigint)
--
-- The collections the caller may read (kb.readable_collections: every one for writers and the
-- owner), each with its description, when it was created and how many documents and chunks it
-- holds, by name. What `pgkb collections` prints; a reader granted some collections sees only
-- those, so the list does not reveal the others' names. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.collection_list()
RETURNS TABLE (
    name text,
    description text,
    created_at timestamptz,
    documents bigint,
    chunks bigint)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.name, c.description, c.created_at,
           (SELECT count(*) FROM kb.documents d WHERE d.collection = c.name),
           (SELECT count(*) FROM kb.chunks ch JOIN kb.documents d ON d.id = ch.document_id
             WHERE d.collection = c.name)
      FROM kb.collections c
     WHERE coalesce(c.name = ANY ((SELECT kb.readable_collections())::text[]), true)
     ORDER BY c.name;
$$;

COMMENT ON FUNCTION kb.collection_list() IS
'The collections the caller may read, with description, creation time and document and chunk counts, by name.';

REVOKE ALL ON FUNCTION kb.collection_list() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_list() TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_list() TO kb_writer;
    END IF;
END
$$;
