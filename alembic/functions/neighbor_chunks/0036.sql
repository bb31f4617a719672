-- kb.neighbor_chunks(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
--   -> TABLE (chunk_id, document_id, chunk_index, heading_path, content, token_count, is_hit boolean)
--
-- The chunk `chunk_id` (is_hit = true) with up to `before` chunks preceding it and up to `after`
-- chunks following it in the same document, in document order (chunk_index). Neighbours are the
-- nearest existing chunks, so gaps in chunk_index do not shorten the window. No rows when the
-- chunk does not exist or its document is in a collection the caller may not read
-- (kb.collection_readable); negative before/after count as 0, and more than 50 as 50 (the
-- documented maximum: at most 101 chunks). For one merged passage see kb.merge_neighbors.
-- Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.neighbor_chunks(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    chunk_index integer,
    heading_path text,
    content text,
    token_count integer,
    is_hit boolean)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH hit AS (
        SELECT c.id, c.document_id, c.chunk_index
          FROM kb.chunks c
          JOIN kb.documents d ON d.id = c.document_id
         WHERE c.id = neighbor_chunks.chunk_id
           AND kb.collection_readable(d.collection)  -- the caller's collections only
    ),
    window_ AS (
        SELECT h.id FROM hit h
        UNION ALL
        (SELECT p.id FROM hit h JOIN kb.chunks p
             ON p.document_id = h.document_id AND p.chunk_index < h.chunk_index
          ORDER BY p.chunk_index DESC
          LIMIT least(greatest(coalesce(neighbor_chunks.before, 0), 0), 50))
        UNION ALL
        (SELECT s.id FROM hit h JOIN kb.chunks s
             ON s.document_id = h.document_id AND s.chunk_index > h.chunk_index
          ORDER BY s.chunk_index
          LIMIT least(greatest(coalesce(neighbor_chunks.after, 0), 0), 50))
    )
    SELECT c.id, c.document_id, c.chunk_index, c.heading_path, c.content, c.token_count,
           c.id = neighbor_chunks.chunk_id
      FROM window_ w
      JOIN kb.chunks c ON c.id = w.id
     ORDER BY c.chunk_index;
$$;

COMMENT ON FUNCTION kb.neighbor_chunks(bigint, integer, integer) IS
'The chunk with up to `before` preceding and `after` following chunks of its document, in document order; is_hit marks the chunk itself. Maximum: before and after 50 (larger values act as 50).';

REVOKE ALL ON FUNCTION kb.neighbor_chunks(bigint, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.neighbor_chunks(bigint, integer, integer) TO kb_reader;
    END IF;
END
$$;
