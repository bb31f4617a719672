-- kb.show_document(document_id uuid)
--   -> TABLE (id uuid, title text, source_uri text, category text, doc_type text, summary text,
--             key_entities text[], toc jsonb, metadata_origin text, metadata jsonb,
--             created_at timestamptz, updated_at timestamptz, chunks integer,
--             edges_out jsonb, edges_in jsonb, unresolved_links jsonb)
--
-- One document with everything `pgkb docs show` prints: its metadata and stored outline (toc),
-- its chunk count, its edges out and in (JSON arrays of {relation_type, origin, evidence,
-- document_id, title, source_uri}, ordered by title then relation type) and the links it makes
-- to sources that are not in the knowledge base (JSON array of {target_uri, anchor}). No row
-- when the document does not exist. Reads only (STABLE).
-- No row either when the document is in a collection the caller may not read
-- (kb.collection_scope, read once); its edges list only documents the caller may read, and a link
-- counts as unresolved unless its target is in the document's own collection.
CREATE OR REPLACE FUNCTION kb.show_document(document_id uuid)
RETURNS TABLE (
    id uuid,
    title text,
    source_uri text,
    category text,
    doc_type text,
    summary text,
    key_entities text[],
    toc jsonb,
    metadata_origin text,
    metadata jsonb,
    created_at timestamptz,
    updated_at timestamptz,
    chunks integer,
    edges_out jsonb,
    edges_in jsonb,
    unresolved_links jsonb)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH scope AS MATERIALIZED (  -- read once, not per edge (as kb.collection_readable would)
        SELECT kb.collection_scope(NULL) AS names
    )
    SELECT d.id, d.title, d.source_uri, d.category, d.doc_type, d.summary, d.key_entities,
           d.toc, d.metadata_origin, d.metadata, d.created_at, d.updated_at,
           (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer,
           coalesce((SELECT jsonb_agg(jsonb_build_object(
                                'relation_type', r.relation_type, 'origin', r.origin,
                                'evidence', r.evidence, 'document_id', o.id::text,
                                'title', o.title, 'source_uri', o.source_uri)
                            ORDER BY o.title, o.id, r.relation_type)
                       FROM kb.document_relations r JOIN kb.documents o ON o.id = r.target_id
                      WHERE r.source_id = d.id
                        AND (s.names IS NULL OR o.collection = ANY (s.names))), '[]'::jsonb),
           coalesce((SELECT jsonb_agg(jsonb_build_object(
                                'relation_type', r.relation_type, 'origin', r.origin,
                                'evidence', r.evidence, 'document_id', o.id::text,
                                'title', o.title, 'source_uri', o.source_uri)
                            ORDER BY o.title, o.id, r.relation_type)
                       FROM kb.document_relations r JOIN kb.documents o ON o.id = r.source_id
                      WHERE r.target_id = d.id
                        AND (s.names IS NULL OR o.collection = ANY (s.names))), '[]'::jsonb),
           coalesce((SELECT jsonb_agg(jsonb_build_object('target_uri', l.target_uri,
                                                         'anchor', l.anchor)
                            ORDER BY l.target_uri)
                       FROM kb.document_links l
                      WHERE l.source_id = d.id
                        AND NOT EXISTS (SELECT 1 FROM kb.documents t
                                         WHERE t.source_uri = l.target_uri
                                           AND t.collection = d.collection)), '[]'::jsonb)
      FROM kb.documents d, scope s
     WHERE d.id = show_document.document_id
       AND (s.names IS NULL OR d.collection = ANY (s.names));  -- the caller's collections only
$$;

COMMENT ON FUNCTION kb.show_document(uuid) IS
'One document with its metadata, outline, chunk count, edges in and out, and links to sources outside the knowledge base.';

REVOKE ALL ON FUNCTION kb.show_document(uuid) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.show_document(uuid) TO kb_reader;
    END IF;
END
$$;
