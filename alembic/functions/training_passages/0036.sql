-- kb.training_passages(after_chunk bigint DEFAULT 0, batch_size integer DEFAULT 1000)
--   -> TABLE (chunk_id bigint, document_id uuid, source_uri text, title text,
--             heading_path text, chunk_index integer, content text)
--
-- The knowledge base's own text, for fine-tuning its embedding model on it (pgkb models tune):
-- the next batch_size chunks by id after after_chunk (keyset pagination), each with its
-- document's id, source URI and title, its heading path, its place in the document and its
-- content. The tuner builds unlabelled training pairs from this structure (a heading path with
-- its section, a title with its lead, a sentence with the passage it comes from) and finds the
-- passages of labelled pairs' source documents. Only chunks of the caller's collections
-- (kb.collection_scope) are returned. batch_size is clamped to 1..10,000. Reads only (STABLE);
-- never raises beyond kb.collection_scope's PK030. EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.training_passages(
    after_chunk bigint DEFAULT 0,
    batch_size integer DEFAULT 1000)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    source_uri text,
    title text,
    heading_path text,
    chunk_index integer,
    content text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.id, d.id, d.source_uri, d.title, c.heading_path, c.chunk_index, c.content
      FROM kb.chunks c
      JOIN kb.documents d ON d.id = c.document_id
     WHERE c.id > coalesce(training_passages.after_chunk, 0)
       AND coalesce(d.collection = ANY ((SELECT kb.collection_scope(NULL))::text[]), true)
     ORDER BY c.id
     LIMIT least(greatest(coalesce(training_passages.batch_size, 1000), 1), 10000);
$$;

COMMENT ON FUNCTION kb.training_passages(bigint, integer) IS
'The next batch of chunks (by id, after after_chunk) of the caller''s collections with their document''s id, source URI and title, heading path, position and content: the text pgkb models tune trains on. batch_size clamped to 1..10000.';

REVOKE ALL ON FUNCTION kb.training_passages(bigint, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.training_passages(bigint, integer) TO kb_writer;
    END IF;
END
$$;
