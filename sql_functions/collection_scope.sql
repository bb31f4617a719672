-- kb.collection_scope(requested text[]) -> text[]
--
-- The collections a read may look in: the requested ones (NULL or empty: every collection the
-- caller may read, see kb.readable_collections), each of which must exist and be readable by
-- the caller. Returns NULL when that means every collection with no restriction (a caller who
-- reads everything and requested none), otherwise the sorted, distinct collection names (an
-- empty array when the caller may read none). A requested collection that does not exist or
-- that the caller may not read raises invalid_parameter_value with the same message either way,
-- so the error does not tell whether a collection the caller cannot read exists. Every reader
-- function applies it (through kb.search_filters, or kb.collection_readable for one document).
-- Reads only (STABLE).
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
    wanted text[];
    bad text;
BEGIN
    IF requested IS NULL OR pg_catalog.cardinality(requested) = 0 THEN
        RETURN readable;
    END IF;
    wanted := ARRAY(SELECT DISTINCT r FROM pg_catalog.unnest(requested[1:1000]) AS r ORDER BY r);
    SELECT r INTO bad
      FROM pg_catalog.unnest(wanted) AS r
     WHERE r IS NULL
        OR NOT (readable IS NULL OR r = ANY (readable))
        OR NOT EXISTS (SELECT 1 FROM kb.collections c WHERE c.name = r)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'no collection % that role % may read',
            coalesce(pg_catalog.quote_literal(bad), 'NULL'), session_user
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'pgkb collections lists the collections; pgkb db grant ROLE --read --collection NAME gives one';
    END IF;
    RETURN wanted;
END;
$$;

COMMENT ON FUNCTION kb.collection_scope(text[]) IS
'The collections a read may look in: the requested ones (each must exist and be readable by the caller, else one error for both cases) or, for NULL, every readable one; NULL = no restriction. Maximum: 1000 names.';

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
