-- kb.submit_file(source_uri text, data bytea, mime_type text, title text DEFAULT NULL,
--                metadata jsonb DEFAULT '{}', category text DEFAULT NULL,
--                collection text DEFAULT 'default') -> uuid
--
-- kb.submit_document for a file's bytes: `data` of type `mime_type` (text/markdown, text/plain,
-- text/html, application/pdf, or another type `pgkb ingest` reads), extracted by the worker as
-- `pgkb ingest` extracts a file of that type; `title` NULL: the file's own. A type the worker
-- cannot read ends the job as failed with the reason. Same grant, checks and result as
-- kb.submit_document.
CREATE OR REPLACE FUNCTION kb.submit_file(
    source_uri text,
    data bytea,
    mime_type text,
    title text DEFAULT NULL,
    metadata jsonb DEFAULT '{}'::jsonb,
    category text DEFAULT NULL,
    collection text DEFAULT 'default'
)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM kb.collection_writable(submit_file.collection);
    IF submit_file.data IS NULL OR octet_length(submit_file.data) = 0 THEN
        RAISE EXCEPTION 'the file % is empty', quote_literal(submit_file.source_uri)
            USING ERRCODE = 'PK001';
    END IF;
    RETURN kb.enqueue_document('put', submit_file.source_uri, submit_file.collection,
                               submit_file.title, NULL, submit_file.data, submit_file.mime_type,
                               submit_file.metadata, submit_file.category);
END;
$$;

COMMENT ON FUNCTION kb.submit_file(text, bytea, text, text, jsonb, text, text) IS
'Adds or replaces a document from a file''s bytes and MIME type: recorded as pending, extracted and processed by pgkb worker; returns the job''s id. Needs a writing grant on the collection (PK031).';

REVOKE ALL ON FUNCTION kb.submit_file(text, bytea, text, text, jsonb, text, text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.submit_file(text, bytea, text, text, jsonb, text, text) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.submit_file(text, bytea, text, text, jsonb, text, text) TO kb_writer;
    END IF;
END
$$;
