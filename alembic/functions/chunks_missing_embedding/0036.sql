-- kb.chunks_missing_embedding(model_id integer, batch_size integer DEFAULT 256,
--                             after_chunk bigint DEFAULT 0)
--   -> TABLE (chunk_id bigint, title text, heading_path text, content text, content_sha text)
--
-- The next batch_size chunks (by id, after after_chunk: keyset pagination) that have no
-- embedding of model model_id, with what is needed to rebuild the text the model reads (the
-- document title, the heading path, the content). pgkb models reembed reads it batch after batch
-- and commits each batch's vectors, so an interrupted run resumes where it stopped. Reads only
-- (STABLE). EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.chunks_missing_embedding(
    model_id integer,
    batch_size integer DEFAULT 256,
    after_chunk bigint DEFAULT 0)
RETURNS TABLE (
    chunk_id bigint,
    title text,
    heading_path text,
    content text,
    content_sha text)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.id, d.title, c.heading_path, c.content, c.content_sha
      FROM kb.chunks c
      JOIN kb.documents d ON d.id = c.document_id
     WHERE c.id > coalesce(chunks_missing_embedding.after_chunk, 0)
       AND NOT EXISTS (SELECT 1 FROM kb.embeddings e
                        WHERE e.chunk_id = c.id
                          AND e.model_id = chunks_missing_embedding.model_id)
     ORDER BY c.id
     LIMIT greatest(coalesce(chunks_missing_embedding.batch_size, 256), 1);
$$;

COMMENT ON FUNCTION kb.chunks_missing_embedding(integer, integer, bigint) IS
'The next batch of chunks (by id, after after_chunk) without an embedding of the given model, with title, heading path and content to embed.';

REVOKE ALL ON FUNCTION kb.chunks_missing_embedding(integer, integer, bigint) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.chunks_missing_embedding(integer, integer, bigint) TO kb_writer;
    END IF;
END
$$;
