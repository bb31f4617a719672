-- kb.chunks_set_collection(): row trigger on kb.chunks (BEFORE INSERT).
--
-- Sets the new chunk's collection (kb.chunks.collection) to its document's, whatever the writer
-- gave, so writers insert chunks as before (document_id, chunk_index, heading_path, content,
-- content_sha, token_count) and the statistics trigger knows each chunk's collection, also when
-- a deleted document takes its chunks with it. A chunk of a document that does not exist keeps
-- NULL and fails the foreign key (document_id, collection) as before. A document moved to
-- another collection moves its chunks (ON UPDATE CASCADE). Returns NEW.
CREATE OR REPLACE FUNCTION kb.chunks_set_collection()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.collection := (SELECT d.collection FROM kb.documents d WHERE d.id = NEW.document_id);
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION kb.chunks_set_collection() IS
'Trigger: sets a new chunk''s collection to its document''s.';
