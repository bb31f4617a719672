-- kb.chunk_details(chunk_ids bigint[]) -> TABLE (chunk_id bigint, category text, metadata jsonb,
--                                                token_count integer)
--
-- The category and metadata of each chunk's document and the chunk's token count, for the
-- chunks of chunk_ids that exist (in no particular order): what the vector-only and
-- keyword-only searches add to their rows so that every search mode returns the same columns.
-- At most the first 1,000 ids are read. Reads only (STABLE).
-- Only chunks of documents in the caller's collections (kb.collection_scope): others are
-- left out as if they did not exist.
CREATE OR REPLACE FUNCTION kb.chunk_details(chunk_ids bigint[])
RETURNS TABLE (chunk_id bigint, category text, metadata jsonb, token_count integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.id, d.category, d.metadata, c.token_count
      FROM kb.chunks c
      JOIN kb.documents d ON d.id = c.document_id
     WHERE c.id = ANY (chunk_details.chunk_ids[1:1000])
       AND coalesce(d.collection = ANY ((SELECT kb.collection_scope(NULL))::text[]), true);
$$;

COMMENT ON FUNCTION kb.chunk_details(bigint[]) IS
'The document category and metadata and the token count of the given chunks. Maximum: the first 1000 ids.';

REVOKE ALL ON FUNCTION kb.chunk_details(bigint[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.chunk_details(bigint[]) TO kb_reader;
    END IF;
END
$$;
