-- kb.find_documents(ref text, filters jsonb DEFAULT '{}')
--   -> TABLE (document_id uuid, source_uri text)
--
-- The documents a person names: by id (ref is a UUID), by exact source_uri, or else by the end
-- of their source_uri ('sql-createindex.html' matches '.../sql-createindex.html'; a ref without
-- a leading '/' must match after a '/'), each tried in that order until one matches. Only
-- documents within filters (kb.search_filters) are found. At most 6 rows, ordered by
-- source_uri: more than one row means the ref is ambiguous. A NULL or empty ref gives no rows.
-- Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.find_documents(ref text, filters jsonb DEFAULT '{}'::jsonb)
RETURNS TABLE (document_id uuid, source_uri text)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f record;
    wanted text := btrim(coalesce(ref, ''));
    suffix text;
BEGIN
    IF wanted = '' THEN
        RETURN;
    END IF;
    f := kb.search_filters(filters);
    IF wanted ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN QUERY
            SELECT d.id, d.source_uri FROM kb.documents d
             WHERE d.id = wanted::uuid
               AND (f.category IS NULL OR d.category = ANY (f.category))
               AND (f.metadata IS NULL OR d.metadata @> f.metadata)
               AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
               AND (f.collections IS NULL OR d.collection = ANY (f.collections));
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
        SELECT d.id, d.source_uri FROM kb.documents d
         WHERE d.source_uri = wanted
           AND (f.category IS NULL OR d.category = ANY (f.category))
           AND (f.metadata IS NULL OR d.metadata @> f.metadata)
           AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
           AND (f.collections IS NULL OR d.collection = ANY (f.collections));
    IF FOUND THEN
        RETURN;
    END IF;
    suffix := CASE WHEN left(wanted, 1) = '/' THEN wanted ELSE '/' || wanted END;
    RETURN QUERY
        SELECT d.id, d.source_uri FROM kb.documents d
         WHERE right(d.source_uri, length(suffix)) = suffix
           AND (f.category IS NULL OR d.category = ANY (f.category))
           AND (f.metadata IS NULL OR d.metadata @> f.metadata)
           AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
           AND (f.collections IS NULL OR d.collection = ANY (f.collections))
         ORDER BY d.source_uri
         LIMIT 6;
END
$$;

COMMENT ON FUNCTION kb.find_documents(text, jsonb) IS
'The documents a reference names (id, exact source_uri, or the end of a source_uri), within filters; more than one row means ambiguous. Maximum: 6 rows.';

REVOKE ALL ON FUNCTION kb.find_documents(text, jsonb) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.find_documents(text, jsonb) TO kb_reader;
    END IF;
END
$$;
