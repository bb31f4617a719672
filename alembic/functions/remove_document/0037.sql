-- kb.remove_document(source_uri text, collection text DEFAULT 'default') -> uuid
--
-- Removes the document `source_uri` of `collection`: recorded as a pending job in the caller's
-- transaction, after any job of the same source submitted before it; the worker deletes the
-- document (its chunks, embeddings and edges go with it). PK031 for a collection the caller
-- may not write into, PK020 when there is no such document and none is pending. Returns the
-- job's id.
CREATE OR REPLACE FUNCTION kb.remove_document(
    source_uri text,
    collection text DEFAULT 'default'
)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM kb.collection_writable(remove_document.collection);
    RETURN kb.enqueue_document('remove', remove_document.source_uri, remove_document.collection,
                               NULL, NULL, NULL, NULL, '{}'::jsonb, NULL);
END;
$$;

COMMENT ON FUNCTION kb.remove_document(text, text) IS
'Removes a document: recorded as pending in the caller''s transaction, done by pgkb worker; returns the job''s id. Needs a writing grant on the collection (PK031); PK020 when there is no such document.';

REVOKE ALL ON FUNCTION kb.remove_document(text, text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.remove_document(text, text) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.remove_document(text, text) TO kb_writer;
    END IF;
END
$$;
