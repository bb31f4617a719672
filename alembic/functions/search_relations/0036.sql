-- kb.search_relations() -> TABLE (relation regclass, kind text, bytes bigint)
--
-- The relations a search reads, each with its size on disk, largest first: the kb schema's
-- tables and indexes, and the chunks' TOAST table with its index; not kb.term_postings' heap,
-- which the keyword leg reads only through its primary key (index-only scans). Their total is
-- the memory shared_buffers needs to serve a warm corpus without copying each page from the
-- operating system's cache first (the scaling guide, "Memory for a large corpus"): pgkb db status
-- compares the two, and bench/scale_bench.py --prewarm reads these relations into shared
-- buffers. kind is 'table', 'index' or 'toast'. Reads only the catalog (STABLE). EXECUTE for the
-- owner only: the sizes would tell a role granted some collections how large the others are.
CREATE OR REPLACE FUNCTION kb.search_relations()
RETURNS TABLE (relation regclass, kind text, bytes bigint)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.oid::regclass, r.kind, pg_relation_size(r.oid)
      FROM (SELECT c.oid, CASE c.relkind WHEN 'i' THEN 'index' ELSE 'table' END AS kind
              FROM pg_class c
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'kb' AND c.relkind IN ('r', 'i') AND c.relname <> 'term_postings'
            UNION ALL
            SELECT x.oid, 'toast'
              FROM pg_class t
             CROSS JOIN LATERAL (SELECT t.reltoastrelid AS oid
                                 UNION ALL
                                 SELECT i.indexrelid FROM pg_index i
                                  WHERE i.indrelid = t.reltoastrelid) x
             WHERE t.oid = 'kb.chunks'::regclass AND t.reltoastrelid <> 0) r
     ORDER BY 3 DESC, 1;
$$;

COMMENT ON FUNCTION kb.search_relations() IS
'The relations searches read (kb tables and indexes, the chunks'' TOAST table and its index; not the postings'' heap) with their sizes, largest first: what shared_buffers should hold for a warm corpus. Owner only.';

REVOKE ALL ON FUNCTION kb.search_relations() FROM PUBLIC;
