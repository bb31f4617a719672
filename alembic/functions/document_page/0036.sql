-- kb.document_page(filters jsonb DEFAULT '{}', document_type text DEFAULT NULL,
--                  title_words text DEFAULT NULL, sort text DEFAULT 'title',
--                  stale_after interval DEFAULT NULL, page_offset integer DEFAULT 0,
--                  page_size integer DEFAULT 50, document_ids uuid[] DEFAULT NULL)
--   -> TABLE (document_id uuid, title text, source_uri text, collection text, category text,
--             doc_type text, summary text, key_entities text[], chunk_count integer,
--             edges_out integer, edges_in integer, updated_at timestamptz, stale boolean,
--             total integer)
--
-- One page of the catalogue, for a browser: the documents within filters (kb.search_filters:
-- category, metadata, source, collections, never past the caller's collections) and, when
-- given, of type document_type, among document_ids, and whose title or source_uri holds every
-- word of title_words (case-insensitive substrings, split on white space; at most 20 words of
-- 200 characters). sort is 'title' (title, then source_uri) or 'updated' (newest first, then
-- title); anything else raises PK001 (invalid argument). page_offset (clamped to >= 0) rows are
-- skipped and page_size (clamped to 1..500) returned. Every row carries the document's
-- metadata, its chunk count, its edges out and in (to and from documents the caller may read),
-- stale = updated_at older than now() - stale_after (false when stale_after is NULL), and
-- total, the number of matching documents on every page (no row when none matches). The
-- counts are computed for the returned page only, so a page of the whole catalogue costs
-- about the same as a page of a small one. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.document_page(
    filters jsonb DEFAULT '{}'::jsonb,
    document_type text DEFAULT NULL,
    title_words text DEFAULT NULL,
    sort text DEFAULT 'title',
    stale_after interval DEFAULT NULL,
    page_offset integer DEFAULT 0,
    page_size integer DEFAULT 50,
    document_ids uuid[] DEFAULT NULL)
RETURNS TABLE (
    document_id uuid,
    title text,
    source_uri text,
    collection text,
    category text,
    doc_type text,
    summary text,
    key_entities text[],
    chunk_count integer,
    edges_out integer,
    edges_in integer,
    updated_at timestamptz,
    stale boolean,
    total integer)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- a plan for the arguments of each call: the generic plan PL/pgSQL switches to after five calls
-- cannot tell which of the optional filters are given, and walked 10x slower
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    f record;
    words text[];
    readable text[] := kb.collection_scope(NULL);  -- once, not per edge (kb.collection_readable)
BEGIN
    IF sort IS NULL OR sort NOT IN ('title', 'updated') THEN
        RAISE EXCEPTION 'sort must be title or updated, got %', coalesce(quote_literal(sort), 'NULL')
            USING ERRCODE = 'PK001';
    END IF;
    f := kb.search_filters(filters);
    words := ARRAY(SELECT lower(left(w, 200))
                     FROM unnest(regexp_split_to_array(btrim(coalesce(title_words, '')), '\s+')) w
                    WHERE w <> ''
                    LIMIT 20);
    RETURN QUERY
    WITH matching AS (
        SELECT d.id, d.title, d.source_uri, d.collection, d.category, d.doc_type, d.summary,
               d.key_entities, d.updated_at, count(*) OVER () AS total
          FROM kb.documents d
         WHERE (document_page.document_ids IS NULL OR d.id = ANY (document_page.document_ids))
           AND (document_page.document_type IS NULL OR d.doc_type = document_page.document_type)
           AND (f.category IS NULL OR d.category = ANY (f.category))
           AND (f.metadata IS NULL OR d.metadata @> f.metadata)
           AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
           AND (f.collections IS NULL OR d.collection = ANY (f.collections))
           AND NOT EXISTS (SELECT 1 FROM unnest(words) w
                            WHERE strpos(lower(d.title), w) = 0
                              AND strpos(lower(d.source_uri), w) = 0)
         ORDER BY CASE WHEN document_page.sort = 'updated' THEN d.updated_at END DESC,
                  d.title, d.source_uri, d.id
        OFFSET greatest(coalesce(document_page.page_offset, 0), 0)
         LIMIT least(greatest(coalesce(document_page.page_size, 50), 1), 500)
    )
    SELECT m.id, m.title, m.source_uri, m.collection, m.category, m.doc_type, m.summary,
           m.key_entities,
           (SELECT count(*) FROM kb.chunks c WHERE c.document_id = m.id)::integer,
           (SELECT count(*) FROM kb.document_relations r JOIN kb.documents o ON o.id = r.target_id
             WHERE r.source_id = m.id
               AND (readable IS NULL OR o.collection = ANY (readable)))::integer,
           (SELECT count(*) FROM kb.document_relations r JOIN kb.documents o ON o.id = r.source_id
             WHERE r.target_id = m.id
               AND (readable IS NULL OR o.collection = ANY (readable)))::integer,
           m.updated_at,
           coalesce(m.updated_at < now() - document_page.stale_after, false),
           m.total::integer
      FROM matching m
     ORDER BY CASE WHEN document_page.sort = 'updated' THEN m.updated_at END DESC,
              m.title, m.source_uri, m.id;
END;
$$;

COMMENT ON FUNCTION kb.document_page(jsonb, text, text, text, interval, integer, integer, uuid[]) IS
'One page of the catalogue (filters, type, words of the title or source; by title or newest first) with chunk and edge counts, a stale flag and the total matching. Maximum: 500 rows a page.';

REVOKE ALL ON FUNCTION kb.document_page(jsonb, text, text, text, interval, integer, integer, uuid[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.document_page(jsonb, text, text, text, interval, integer, integer, uuid[]) TO kb_reader;
    END IF;
END
$$;
