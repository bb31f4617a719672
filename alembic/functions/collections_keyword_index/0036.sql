-- kb.collections_keyword_index() -> trigger
--
-- Trigger function of kb.collections (AFTER INSERT OR DELETE, FOR EACH ROW): when the
-- pg_textsearch extension is installed in the database, a new collection gets its bm25 index on
-- kb.chunks (as kb.build_keyword_indexes creates it: empty, so at once) and a removed
-- collection's index is dropped; without the extension it does nothing. SECURITY DEFINER (the
-- owner's rights: kb_writer creates collections but owns no index).
CREATE OR REPLACE FUNCTION kb.collections_keyword_index()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_textsearch') THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON kb.chunks USING bm25 ((heading_path || '' '' || content))'
            ' WITH (text_config = ''english'', k1 = 0.9, b = 0.75) WHERE collection = %L',
            kb.keyword_index_name(NEW.name), NEW.name);
    ELSIF TG_OP = 'DELETE' THEN
        EXECUTE format('DROP INDEX IF EXISTS kb.%I', kb.keyword_index_name(OLD.name));
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION kb.collections_keyword_index() IS
'Trigger of kb.collections: with pg_textsearch installed, creates a new collection''s bm25 index on kb.chunks and drops a removed one''s.';

REVOKE ALL ON FUNCTION kb.collections_keyword_index() FROM PUBLIC;
