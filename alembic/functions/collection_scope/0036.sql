-- kb.collection_scope(requested text[]) -> text[]
--
-- The collections a read may look in. Three narrowings, each within the one before:
--   1. the caller's grants: kb.readable_collections (NULL = every collection);
--   2. the session's collections: the setting pgkb.collections (comma-separated names, what
--      `pgkb ... --collection` and the servers' --collection set on their connections; unset or
--      empty = no narrowing). Any role may set it, and it only ever narrows;
--   3. requested (NULL or empty = no narrowing).
-- Every name in 2 and 3 must exist and be readable by the caller, and every name in 3 must be
-- within 2; otherwise PK030, with the same message whether the collection
-- does not exist or the caller may not read it, so the error does not tell whether a collection
-- the caller cannot read exists. Returns NULL when the result is every collection with no
-- restriction (a caller who reads everything, no session collections, none requested),
-- otherwise the sorted, distinct names (an empty array when the caller may read none). Every
-- reader function applies it, through kb.search_filters (key collections) or
-- kb.collection_readable. At most 1000 names are read from each list. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.collection_scope(requested text[])
RETURNS text[]
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    readable text[] := kb.readable_collections();
    raw text := nullif(pg_catalog.btrim(pg_catalog.current_setting('pgkb.collections', true)), '');
    session_names text[];
    wanted text[];
    bad text;
BEGIN
    IF raw IS NOT NULL THEN
        session_names := ARRAY(
            SELECT DISTINCT pg_catalog.btrim(x)
              FROM pg_catalog.unnest((pg_catalog.string_to_array(raw, ','))[1:1000]) AS x
             WHERE pg_catalog.btrim(x) <> ''
             ORDER BY 1);
    END IF;
    IF requested IS NOT NULL AND pg_catalog.cardinality(requested) > 0 THEN
        wanted := ARRAY(SELECT DISTINCT r FROM pg_catalog.unnest(requested[1:1000]) AS r ORDER BY r);
    END IF;
    SELECT r INTO bad
      FROM pg_catalog.unnest(coalesce(session_names, '{}') || coalesce(wanted, '{}')) AS r
     WHERE r IS NULL
        OR NOT (readable IS NULL OR r = ANY (readable))
        OR NOT EXISTS (SELECT 1 FROM kb.collections c WHERE c.name = r)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'no collection % that role % may read',
            coalesce(pg_catalog.quote_literal(bad), 'NULL'), session_user
            USING ERRCODE = 'PK030',
                  HINT = 'pgkb collections lists the collections you may read; pgkb db grant ROLE --read --collection NAME gives one';
    END IF;
    IF wanted IS NOT NULL AND session_names IS NOT NULL THEN
        SELECT r INTO bad FROM pg_catalog.unnest(wanted) AS r
         WHERE NOT (r = ANY (session_names)) LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'collection % is outside this session''s collections (%)',
                pg_catalog.quote_literal(bad), pg_catalog.array_to_string(session_names, ', ')
                USING ERRCODE = 'PK030',
                      HINT = 'ask for one of them, or leave collections out';
        END IF;
    END IF;
    RETURN coalesce(wanted, session_names, readable);
END;
$$;

COMMENT ON FUNCTION kb.collection_scope(text[]) IS
'The collections a read may look in: the caller''s grants, narrowed by the session setting pgkb.collections, narrowed by requested (each name must exist and be readable, one error for both cases); NULL = no restriction. Maximum: 1000 names per list.';

REVOKE ALL ON FUNCTION kb.collection_scope(text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_scope(text[]) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.collection_scope(text[]) TO kb_writer;
    END IF;
END
$$;
