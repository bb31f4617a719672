-- kb.chunk_lexemes(chunk_ids bigint[], lexemes text[]) -> TABLE (chunk_id bigint, lexemes text[])
--
-- For each chunk of chunk_ids that exists (the first 1,000 ids), which of `lexemes` (the first
-- 1,000) its text holds (its tsv). In no particular order. The abstention gate's coverage
-- signal: how much of the query's IDF weight the best hit carries. Reads only (STABLE).
-- Only chunks of documents in the caller's collections (kb.collection_scope): others are
-- left out as if they did not exist.
CREATE OR REPLACE FUNCTION kb.chunk_lexemes(chunk_ids bigint[], lexemes text[])
RETURNS TABLE (chunk_id bigint, lexemes text[])
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.id,
           array(SELECT unnest(tsvector_to_array(c.tsv))
                 INTERSECT SELECT unnest(chunk_lexemes.lexemes[1:1000]))
      FROM kb.chunks c
      JOIN kb.documents d ON d.id = c.document_id
     WHERE c.id = ANY (chunk_lexemes.chunk_ids[1:1000])
       AND coalesce(d.collection = ANY ((SELECT kb.collection_scope(NULL))::text[]), true);
$$;

COMMENT ON FUNCTION kb.chunk_lexemes(bigint[], text[]) IS
'Which of the given lexemes each chunk holds (the abstention gate''s coverage signal). Maximum: 1000 chunk ids and 1000 lexemes.';

REVOKE ALL ON FUNCTION kb.chunk_lexemes(bigint[], text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.chunk_lexemes(bigint[], text[]) TO kb_reader;
    END IF;
END
$$;
