-- kb.document_list(filters jsonb DEFAULT '{}', document_ids uuid[] DEFAULT NULL,
--                  max_results integer DEFAULT 1000)
--   -> TABLE (document_id uuid, title text, source_uri text, category text, doc_type text,
--             summary text, key_entities text[], chunk_count integer, edges_out integer,
--             edges_in integer, updated_at timestamptz)
--
-- The catalogue: the documents that satisfy filters (kb.search_filters: category, metadata, collections,
-- source) and, when document_ids is given, are among them, each with its metadata (type,
-- summary, key entities), its chunk count and its edges out and in, ordered by title then
-- source_uri. What `pgkb docs list`, the reader agent's document checks and the MCP server's
-- list_documents read. max_results is clamped to 1..10,000 (NULL acts as 1,000): bounded work
-- for kb_reader, which has no table privilege. A bad filters object raises
-- PK001 (invalid argument). Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.document_list(
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    max_results integer DEFAULT 1000)
RETURNS TABLE (
    document_id uuid,
    title text,
    source_uri text,
    category text,
    doc_type text,
    summary text,
    key_entities text[],
    chunk_count integer,
    edges_out integer,
    edges_in integer,
    updated_at timestamptz)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id, d.title, d.source_uri, d.category, d.doc_type, d.summary, d.key_entities,
           (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer,
           (SELECT count(*) FROM kb.document_relations r WHERE r.source_id = d.id)::integer,
           (SELECT count(*) FROM kb.document_relations r WHERE r.target_id = d.id)::integer,
           d.updated_at
      FROM kb.documents d, kb.search_filters(document_list.filters) f
     WHERE (document_list.document_ids IS NULL OR d.id = ANY (document_list.document_ids))
       AND (f.category IS NULL OR d.category = ANY (f.category))
       AND (f.metadata IS NULL OR d.metadata @> f.metadata)
       AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
       AND (f.collections IS NULL OR d.collection = ANY (f.collections))
     ORDER BY d.title, d.source_uri
     LIMIT least(greatest(coalesce(document_list.max_results, 1000), 1), 10000);
$$;

COMMENT ON FUNCTION kb.document_list(jsonb, uuid[], integer) IS
'The catalogue of documents within filters (and document_ids): title, source, type, summary, key entities, chunk and edge counts. Maximum: 10000 rows (max_results is clamped).';

REVOKE ALL ON FUNCTION kb.document_list(jsonb, uuid[], integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.document_list(jsonb, uuid[], integer) TO kb_reader;
    END IF;
END
$$;
