-- kb.document_facets(filters jsonb DEFAULT '{}')
--   -> TABLE (facet text, value text, documents integer)
--
-- The values a catalogue can be narrowed by, with how many documents within filters
-- (kb.search_filters: never past the caller's collections) have each: facet 'collection',
-- 'category' (value NULL for documents without one) and 'doc_type', by facet then value. What
-- the web interface's filter menus list. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.document_facets(filters jsonb DEFAULT '{}'::jsonb)
RETURNS TABLE (facet text, value text, documents integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH docs AS (
        SELECT d.collection, d.category, d.doc_type
          FROM kb.documents d, kb.search_filters(document_facets.filters) f
         WHERE (f.category IS NULL OR d.category = ANY (f.category))
           AND (f.metadata IS NULL OR d.metadata @> f.metadata)
           AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
           AND (f.collections IS NULL OR d.collection = ANY (f.collections))
    )
    SELECT x.facet, x.value, x.documents::integer
      FROM (SELECT 'collection' AS facet, docs.collection AS value, count(*) AS documents
              FROM docs GROUP BY docs.collection
            UNION ALL
            SELECT 'category', docs.category, count(*) FROM docs GROUP BY docs.category
            UNION ALL
            SELECT 'doc_type', docs.doc_type, count(*) FROM docs GROUP BY docs.doc_type) x
     ORDER BY x.facet, x.value NULLS LAST;
$$;

COMMENT ON FUNCTION kb.document_facets(jsonb) IS
'The collections, categories and document types of the documents within filters, each with its document count (the web interface''s filter menus).';

REVOKE ALL ON FUNCTION kb.document_facets(jsonb) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.document_facets(jsonb) TO kb_reader;
    END IF;
END
$$;
