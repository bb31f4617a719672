-- kb.stale_documents(older_than interval, collections text[] DEFAULT NULL) -> TABLE (document_id uuid, source_uri text,
--     title text, category text, updated_at timestamptz, age interval, chunks bigint)
--
-- Documents not updated (ingested new or changed) for longer than older_than, oldest first:
-- candidates to re-check at their source or to remove (pgkb docs stale, pgkb docs remove). age
-- is now() - updated_at; collections limits them to those collections (NULL = all). A NULL or
-- negative older_than raises PK001 (invalid argument).
-- Reads only (STABLE). EXECUTE for kb_writer, not for kb_reader.
CREATE OR REPLACE FUNCTION kb.stale_documents(older_than interval, collections text[] DEFAULT NULL)
RETURNS TABLE (
    document_id uuid,
    source_uri text,
    title text,
    category text,
    updated_at timestamptz,
    age interval,
    chunks bigint)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must be a positive interval, got %',
            coalesce(older_than::text, 'NULL')
            USING ERRCODE = 'PK001', HINT = 'e.g. interval ''90 days''';
    END IF;
    RETURN QUERY
    SELECT d.id, d.source_uri, d.title, d.category, d.updated_at,
           pg_catalog.now() - d.updated_at,
           (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)
      FROM kb.documents d
     WHERE d.updated_at < pg_catalog.now() - older_than
       AND (stale_documents.collections IS NULL OR d.collection = ANY (stale_documents.collections))
     ORDER BY d.updated_at, d.source_uri;
END;
$$;

COMMENT ON FUNCTION kb.stale_documents(interval, text[]) IS
'Documents not updated for longer than older_than, oldest first, with their age and chunk count.';

REVOKE ALL ON FUNCTION kb.stale_documents(interval, text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.stale_documents(interval, text[]) TO kb_writer;
    END IF;
END
$$;
