-- kb.submit_document(source_uri text, title text, content text, metadata jsonb DEFAULT '{}',
--                    category text DEFAULT NULL, collection text DEFAULT 'default') -> uuid
--
-- Adds or replaces the document `source_uri` of `collection` with the text `content` (Markdown
-- or plain text), titled `title` (NULL: its first heading, else its first line), with
-- `metadata` (a JSON object) and `category`. Any role granted writing of the collection (`pgkb db
-- grant ROLE --write --collection NAME`) may call it; PK031 for a collection it may not write
-- into, PK001 for a bad argument (kb.enqueue_document). The document is recorded as a pending
-- job in the caller's transaction, so it is submitted exactly when that transaction commits;
-- a worker (`pgkb worker`, or `pgkb serve --worker`) then reads, chunks, embeds and links it
-- exactly as `pgkb ingest` does, and kb.document_jobs shows its state (pending, processing,
-- ready, failed with its error). Submitting the same document again changes nothing. Returns
-- the job's id.
CREATE OR REPLACE FUNCTION kb.submit_document(
    source_uri text,
    title text,
    content text,
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
    PERFORM kb.collection_writable(submit_document.collection);
    IF submit_document.content IS NULL THEN
        RAISE EXCEPTION 'content is NULL' USING ERRCODE = 'PK001',
            HINT = 'give the document''s text; kb.remove_document removes a document';
    END IF;
    RETURN kb.enqueue_document('put', submit_document.source_uri, submit_document.collection,
                               submit_document.title, submit_document.content, NULL, NULL,
                               submit_document.metadata, submit_document.category);
END;
$$;

COMMENT ON FUNCTION kb.submit_document(text, text, text, jsonb, text, text) IS
'Adds or replaces a document from its text: recorded as pending in the caller''s transaction, processed by pgkb worker; returns the job''s id. Needs a writing grant on the collection (PK031).';

REVOKE ALL ON FUNCTION kb.submit_document(text, text, text, jsonb, text, text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.submit_document(text, text, text, jsonb, text, text) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.submit_document(text, text, text, jsonb, text, text) TO kb_writer;
    END IF;
END
$$;
