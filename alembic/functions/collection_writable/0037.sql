-- kb.collection_writable(collection text) -> void
--
-- Raises PK031 unless the session's login role may write into `collection`
-- (kb.writable_collections(): its grants with can_write, or every collection for the loader and
-- the owner). The check kb.submit_document, kb.submit_file and kb.remove_document make before
-- anything is recorded; the message is the same whether the collection exists or not.
CREATE OR REPLACE FUNCTION kb.collection_writable(collection text)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names text[] := kb.writable_collections();
    name text := coalesce(nullif(btrim(collection_writable.collection), ''), 'default');
BEGIN
    IF names IS NOT NULL AND NOT (name = ANY (names)) THEN
        RAISE EXCEPTION 'role % may not write into collection %', session_user, quote_literal(name)
            USING ERRCODE = 'PK031',
                  HINT = CASE WHEN cardinality(names) = 0
                              THEN 'it may write into no collection: pgkb db grant ROLE --write --collection NAME'
                              ELSE 'it may write into: ' || array_to_string(names, ', ') END;
    END IF;
END;
$$;

COMMENT ON FUNCTION kb.collection_writable(text) IS
'Raises PK031 unless the session''s login role may write into the collection (kb.writable_collections).';

REVOKE ALL ON FUNCTION kb.collection_writable(text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_writable(text) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_writable(text) TO kb_writer;
    END IF;
END
$$;
