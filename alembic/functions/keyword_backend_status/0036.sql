-- kb.keyword_backend_status() -> jsonb
--
-- What serves the keyword leg for the caller, and why, for `pgkb db status`, `pgkb db doctor`
-- and `pgkb db upgrade`: {"setting": the session's pgkb.keyword_backend (auto when unset),
-- "backend": 'sql' or 'pg_textsearch' for the caller's collections (kb.collection_scope),
-- "reason": one line saying why that backend (and, when pg_textsearch does not serve, what would
-- make it), "available": the server has the extension's files, "loaded": the server loaded
-- its library (shared_preload_libraries), "installed": the extension's version in this
-- database or null, "indexes": the caller's readable collections with a valid bm25 index,
-- "collections": the caller's readable collections}. Never raises for a missing piece (a forced pg_textsearch that cannot serve
-- reports backend 'unavailable' with the reason). SECURITY DEFINER, EXECUTE for kb_reader and
-- kb_writer: it names no document, only whether the backend's pieces exist.
CREATE OR REPLACE FUNCTION kb.keyword_backend_status()
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    setting text := coalesce(nullif(current_setting('pgkb.keyword_backend', true), ''), 'auto');
    available boolean;
    loaded boolean;
    installed text;
    n_indexes integer;
    n_collections integer;
    backend text;
    reason text;
BEGIN
    available := EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions a
                          WHERE a.name = 'pg_textsearch');
    loaded := EXISTS (SELECT 1 FROM pg_catalog.pg_settings s WHERE s.name LIKE 'pg\_textsearch.%');
    SELECT e.extversion INTO installed FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_textsearch';
    SELECT count(*) FILTER (WHERE EXISTS (
               SELECT 1 FROM pg_catalog.pg_class i JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
                WHERE i.relname = kb.keyword_index_name(c.name)
                  AND i.relnamespace = 'kb'::pg_catalog.regnamespace AND x.indisvalid)),
           count(*)
      INTO n_indexes, n_collections
      FROM kb.collections c
     WHERE kb.collection_readable(c.name);
    BEGIN
        backend := kb.keyword_backend(kb.collection_scope(NULL));
    EXCEPTION WHEN SQLSTATE 'PK040' OR SQLSTATE 'PK001' OR SQLSTATE 'PK030' THEN
        backend := 'unavailable';
        reason := SQLERRM;
    END;
    IF reason IS NULL THEN
        reason := CASE
            WHEN backend = 'pg_textsearch' THEN
                format('pg_textsearch %s, a bm25 index per collection (%s)', installed, n_indexes)
            WHEN setting = 'sql' THEN 'the keyword_backend setting is sql'
            WHEN NOT available THEN
                'pg_textsearch is not installed on this server (see the search guide to install it)'
            WHEN NOT loaded THEN
                'pg_textsearch is installed on the server but not loaded: add it to shared_preload_libraries and restart the server'
            WHEN installed IS NULL THEN
                'pg_textsearch is loaded but not created in this database: pgkb db upgrade creates it (as a superuser)'
            WHEN n_indexes = n_collections THEN
                'more than 8 collections with chunks are read at once: the SQL BM25 is faster than an index scan per collection'
            ELSE format('%s of %s collections have their bm25 index: pgkb db upgrade builds the others',
                        n_indexes, n_collections)
        END;
    END IF;
    RETURN jsonb_build_object('setting', setting, 'backend', backend, 'reason', reason,
                              'available', available, 'loaded', loaded, 'installed', installed,
                              'indexes', n_indexes, 'collections', n_collections);
END;
$$;

COMMENT ON FUNCTION kb.keyword_backend_status() IS
'Which keyword backend serves the caller (sql or pg_textsearch) and why, in one line, with the setting and whether pg_textsearch is available, loaded, installed and indexed per collection.';

REVOKE ALL ON FUNCTION kb.keyword_backend_status() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.keyword_backend_status() TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.keyword_backend_status() TO kb_writer;
    END IF;
END
$$;
