-- kb.keyword_backend(collections text[] DEFAULT NULL) -> text
--
-- Which backend computes the keyword leg's BM25 for a call reading `collections` (NULL: every
-- collection; kb.keyword_search passes its filters' collections, the caller's scope): 'sql'
-- (kb.keyword_search's own BM25 in SQL) or 'pg_textsearch' (the pg_textsearch extension's bm25
-- index, one partial index per collection, kb.keyword_search_pg_textsearch). The session's
-- setting pgkb.keyword_backend decides (pgkb sets it from its keyword_backend setting on every
-- connection; a SQL caller may SET it):
--   'sql'            always 'sql';
--   'pg_textsearch'  'pg_textsearch', or PK040 naming what is missing: the extension, or the
--                    bm25 index of one of the collections (pgkb db upgrade creates them);
--   'auto', '' or unset (the default): 'pg_textsearch' when the extension is installed in the
--                    database, every collection read has a valid bm25 index and the call reads
--                    at most 8 collections holding chunks (each is one index scan, planned
--                    beside every other collection's index: at 10,000 chunks, 10 collections
--                    still beat the SQL BM25 and 100 take 8 times as long), else 'sql'.
-- Any other value raises PK001. STABLE (reads the catalog and kb.collections).
CREATE OR REPLACE FUNCTION kb.keyword_backend(collections text[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    setting text := coalesce(nullif(current_setting('pgkb.keyword_backend', true), ''), 'auto');
    missing text;
    searched integer;
BEGIN
    IF setting NOT IN ('auto', 'sql', 'pg_textsearch') THEN
        RAISE EXCEPTION 'unknown keyword backend %; valid values are: auto, sql, pg_textsearch',
            quote_literal(setting)
            USING ERRCODE = 'PK001',
                  HINT = 'set keyword_backend (PGKB_KEYWORD_BACKEND) or pgkb.keyword_backend to one of them';
    END IF;
    IF setting = 'sql' THEN
        RETURN 'sql';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_textsearch') THEN
        IF setting = 'pg_textsearch' THEN
            RAISE EXCEPTION 'keyword backend pg_textsearch: the extension is not installed in this database'
                USING ERRCODE = 'PK040',
                      HINT = 'run pgkb db upgrade on a server that loads pg_textsearch (shared_preload_libraries), or set keyword_backend to auto or sql';
        END IF;
        RETURN 'sql';
    END IF;
    SELECT min(c.name) INTO missing
      FROM kb.collections c
     WHERE (keyword_backend.collections IS NULL OR c.name = ANY (keyword_backend.collections))
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class i
                         JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
                        WHERE i.relname = kb.keyword_index_name(c.name)
                          AND i.relnamespace = 'kb'::pg_catalog.regnamespace
                          AND x.indisvalid);
    IF setting = 'auto' THEN
        -- each collection is one index scan, with a cost that grows with the number of indexes:
        -- past about ten, the SQL BM25 (one pass over the candidates whatever their
        -- collections) is faster
        SELECT count(*) INTO searched
          FROM kb.collection_stats s
         WHERE (keyword_backend.collections IS NULL OR s.collection = ANY (keyword_backend.collections))
           AND s.chunk_count > 0;
        IF searched > 8 THEN
            RETURN 'sql';
        END IF;
    END IF;
    IF missing IS NOT NULL THEN
        IF setting = 'pg_textsearch' THEN
            RAISE EXCEPTION 'keyword backend pg_textsearch: collection % has no valid bm25 index (kb.%)',
                quote_literal(missing), kb.keyword_index_name(missing)
                USING ERRCODE = 'PK040',
                      HINT = 'run pgkb db upgrade as the kb owner (it builds the missing indexes), or set keyword_backend to auto or sql';
        END IF;
        RETURN 'sql';
    END IF;
    RETURN 'pg_textsearch';
END;
$$;

COMMENT ON FUNCTION kb.keyword_backend(text[]) IS
'The keyword backend serving a call over these collections (NULL: all): sql, or pg_textsearch when pgkb.keyword_backend is pg_textsearch (PK040 if unavailable) or auto (the default) and the extension and every collection''s bm25 index exist and at most 8 non-empty collections are read.';

REVOKE ALL ON FUNCTION kb.keyword_backend(text[]) FROM PUBLIC;
