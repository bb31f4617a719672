-- kb.build_keyword_indexes() -> integer
--
-- Creates the pg_textsearch bm25 index of every collection that lacks one (or whose index is
-- invalid: dropped and created again), and drops those of collections that no longer exist:
--     kb.<kb.keyword_index_name(name)> ON kb.chunks USING bm25 ((heading_path || ' ' || content))
--         WITH (text_config = 'english', k1 = 0.9, b = 0.75) WHERE collection = <name>
-- the text kb.chunks.tsv indexes (the heading path and the content, the heading counted like the
-- content: kb.keyword_search's default heading_weight 1) with pgkb's BM25 parameters, one
-- partial index per collection so each collection's scores use its own statistics. Returns the
-- number of indexes created. Raises PK040 when the pg_textsearch extension is not installed in
-- the database. Run by `pgkb db upgrade` after it creates the extension; new collections get
-- their index from the trigger on kb.collections (kb.collections_keyword_index). Owner only.
CREATE OR REPLACE FUNCTION kb.build_keyword_indexes()
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    coll text;
    orphan text;
    built integer := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_textsearch') THEN
        RAISE EXCEPTION 'the pg_textsearch extension is not installed in this database'
            USING ERRCODE = 'PK040',
                  HINT = 'CREATE EXTENSION pg_textsearch as a superuser (pgkb db upgrade does it when the server loads the library)';
    END IF;
    FOR orphan IN
        SELECT i.relname FROM pg_catalog.pg_class i
          JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
         WHERE i.relnamespace = 'kb'::pg_catalog.regnamespace
           AND x.indrelid = 'kb.chunks'::pg_catalog.regclass
           AND i.relname LIKE 'chunks\_bm25\_%'
           AND (NOT x.indisvalid
                OR NOT EXISTS (SELECT 1 FROM kb.collections c
                                WHERE kb.keyword_index_name(c.name) = i.relname))
    LOOP
        EXECUTE format('DROP INDEX kb.%I', orphan);
    END LOOP;
    FOR coll IN SELECT c.name FROM kb.collections c ORDER BY c.name LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class i
                        WHERE i.relname = kb.keyword_index_name(coll)
                          AND i.relnamespace = 'kb'::pg_catalog.regnamespace) THEN
            EXECUTE format(
                'CREATE INDEX %I ON kb.chunks USING bm25 ((heading_path || '' '' || content))'
                ' WITH (text_config = ''english'', k1 = 0.9, b = 0.75) WHERE collection = %L',
                kb.keyword_index_name(coll), coll);
            built := built + 1;
        END IF;
    END LOOP;
    RETURN built;
END;
$$;

COMMENT ON FUNCTION kb.build_keyword_indexes() IS
'Creates the missing pg_textsearch bm25 index of each collection on kb.chunks (heading_path || '' '' || content, english, k1 0.9, b 0.75, WHERE collection = name), drops invalid ones and those of removed collections; returns how many it created. PK040 without the extension.';

REVOKE ALL ON FUNCTION kb.build_keyword_indexes() FROM PUBLIC;
