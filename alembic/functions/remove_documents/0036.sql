-- kb.remove_documents(source_uris text[] DEFAULT NULL, document_ids uuid[] DEFAULT NULL,
--                     source_pattern text DEFAULT NULL, dry_run boolean DEFAULT false,
--                     collections text[] DEFAULT NULL)
--   -> TABLE (document_id uuid, source_uri text, title text, chunks bigint, embeddings bigint,
--             relations bigint)
--
-- Deletes the documents whose source_uri is in source_uris, whose id is in document_ids, or
-- whose source_uri matches the LIKE pattern source_pattern ('%' any text, '_' one character),
-- together with their chunks, embeddings and relations (ON DELETE CASCADE; the keyword
-- statistics follow through the chunks trigger). Returns one row per document removed with what
-- went with it, ordered by source_uri; no row when nothing matched. dry_run = true returns the
-- same rows and deletes nothing. All NULL arguments match nothing. collections limits the
-- removal to documents of those collections (NULL = any collection; the same source_uri may be
-- ingested into several). EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.remove_documents(
    source_uris text[] DEFAULT NULL,
    document_ids uuid[] DEFAULT NULL,
    source_pattern text DEFAULT NULL,
    dry_run boolean DEFAULT false,
    collections text[] DEFAULT NULL)
RETURNS TABLE (
    document_id uuid,
    source_uri text,
    title text,
    chunks bigint,
    embeddings bigint,
    relations bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    doomed uuid[];
BEGIN
    SELECT coalesce(array_agg(d.id), '{}') INTO doomed
      FROM kb.documents d
     WHERE (d.source_uri = ANY (coalesce(source_uris, '{}'))
            OR d.id = ANY (coalesce(document_ids, '{}'))
            OR (source_pattern IS NOT NULL AND d.source_uri LIKE source_pattern))
       AND (remove_documents.collections IS NULL OR d.collection = ANY (remove_documents.collections));
    RETURN QUERY
    SELECT d.id, d.source_uri, d.title,
           (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id),
           (SELECT count(*) FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id
             WHERE c.document_id = d.id),
           (SELECT count(*) FROM kb.document_relations r
             WHERE r.source_id = d.id OR r.target_id = d.id)
      FROM kb.documents d
     WHERE d.id = ANY (doomed)
     ORDER BY d.source_uri;
    IF NOT dry_run THEN
        DELETE FROM kb.documents d WHERE d.id = ANY (doomed);
    END IF;
END;
$$;

COMMENT ON FUNCTION kb.remove_documents(text[], uuid[], text, boolean, text[]) IS
'Deletes documents by source_uri, id or LIKE pattern with their chunks, embeddings and relations; returns what went (dry_run: what would go).';

REVOKE ALL ON FUNCTION kb.remove_documents(text[], uuid[], text, boolean, text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.remove_documents(text[], uuid[], text, boolean, text[]) TO kb_writer;
    END IF;
END
$$;
