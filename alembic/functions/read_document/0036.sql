-- kb.read_document(document_id uuid, chunk_start integer DEFAULT NULL, chunk_end integer DEFAULT NULL,
--                  token_budget integer DEFAULT NULL)
--   -> TABLE (status text, document_id, title, source_uri, chunk_count integer, range_tokens integer,
--             chunk_id bigint, chunk_index integer, last_chunk_index integer, heading_path text,
--             content text, token_count integer)
--
-- Budget-guarded reading of a document, or of its chunks chunk_start..chunk_end (inclusive,
-- chunk_index; NULL = from the first / to the last). Every row repeats the document's title,
-- source_uri, chunk_count (all its chunks) and range_tokens (sum of token_count in the range).
--   status 'chunks':   the range fits token_budget (or no budget was given): one row per chunk, in
--                      order (chunk_index = last_chunk_index, content, token_count).
--   status 'outline':  it does not fit: no text, only the outline of the range, one row per
--                      section with its chunk range chunk_index..last_chunk_index (clamped to the
--                      range) and its tokens, so the caller can ask for a range that fits. The
--                      sections are the document's stored outline (kb.documents.toc: heading_path
--                      is the entry's title, indented by two spaces per level below 1) when it has
--                      one, otherwise runs of consecutive chunks with the same kb.chunks.heading_path.
--   status 'empty':    the document exists but has no chunk in the range (one row, no chunk).
--   status 'not_found': there is no such document, or it belongs to a collection the caller may
--                      not read (kb.collection_readable): one row, only document_id set.
-- token_budget is clamped to 100,000 tokens (NULL or larger values act as 100,000): a longer
-- range comes as its outline, so one call never returns an unbounded amount of text.
-- Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.read_document(
    document_id uuid,
    chunk_start integer DEFAULT NULL,
    chunk_end integer DEFAULT NULL,
    token_budget integer DEFAULT NULL)
RETURNS TABLE (
    status text,
    document_id uuid,
    title text,
    source_uri text,
    chunk_count integer,
    range_tokens integer,
    chunk_id bigint,
    chunk_index integer,
    last_chunk_index integer,
    heading_path text,
    content text,
    token_count integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH doc AS (
        SELECT d.id, d.title, d.source_uri, d.toc,
               (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer AS n
          FROM kb.documents d
         WHERE d.id = read_document.document_id
           AND kb.collection_readable(d.collection)  -- the caller's collections only
    ),
    part AS (
        SELECT c.id, c.chunk_index, c.heading_path, c.content, c.token_count
          FROM kb.chunks c
         WHERE c.document_id = read_document.document_id
           AND EXISTS (SELECT 1 FROM doc)
           AND c.chunk_index >= coalesce(read_document.chunk_start, 0)
           AND c.chunk_index <= coalesce(read_document.chunk_end, 2147483647)
    ),
    total AS (
        SELECT count(*) AS n, least(coalesce(sum(p.token_count), 0), 2147483647)::integer AS tokens
          FROM part p
    ),
    verdict AS (
        SELECT CASE
                   WHEN NOT EXISTS (SELECT 1 FROM doc) THEN 'not_found'
                   WHEN t.n = 0 THEN 'empty'
                   WHEN t.tokens <= least(coalesce(read_document.token_budget, 100000), 100000)
                       THEN 'chunks'
                   ELSE 'outline'
               END AS status,
               t.tokens
          FROM total t
    ),
    bounds AS (
        SELECT min(p.chunk_index) AS lo, max(p.chunk_index) AS hi FROM part p
    ),
    stored AS (  -- the stored outline's entries that overlap the range, clamped to it
        SELECT pg_catalog.repeat('  ', greatest(coalesce((e.entry ->> 'level')::integer, 1) - 1, 0))
                 || coalesce(e.entry ->> 'title', '') AS heading_path,
               greatest((e.entry ->> 'chunk_start')::integer, b.lo) AS first_index,
               least((e.entry ->> 'chunk_end')::integer, b.hi) AS last_index,
               e.ord
          FROM doc d, bounds b,
               pg_catalog.jsonb_array_elements(d.toc) WITH ORDINALITY AS e(entry, ord)
         WHERE pg_catalog.jsonb_typeof(d.toc) = 'array'
           AND (e.entry ->> 'chunk_start')::integer <= b.hi
           AND (e.entry ->> 'chunk_end')::integer >= b.lo
    ),
    sections AS (
        SELECT s.heading_path, s.first_index, s.last_index,
               (SELECT coalesce(sum(p.token_count), 0)::integer FROM part p
                 WHERE p.chunk_index BETWEEN s.first_index AND s.last_index) AS tokens,
               s.ord
          FROM stored s
        UNION ALL  -- no stored outline: runs of consecutive chunks sharing a heading_path
        SELECT g.heading_path, min(g.chunk_index), max(g.chunk_index),
               sum(g.token_count)::integer, NULL
          FROM (SELECT p.*,
                       row_number() OVER (ORDER BY p.chunk_index)
                         - row_number() OVER (PARTITION BY p.heading_path ORDER BY p.chunk_index) AS run
                  FROM part p) g
         WHERE NOT EXISTS (SELECT 1 FROM stored)
         GROUP BY g.heading_path, g.run
    )
    SELECT v.status, read_document.document_id, NULL::text, NULL::text, 0, 0,
           NULL::bigint, NULL::integer, NULL::integer, NULL::text, NULL::text, NULL::integer
      FROM verdict v WHERE v.status = 'not_found'
    UNION ALL
    SELECT v.status, d.id, d.title, d.source_uri, d.n, v.tokens,
           NULL, NULL, NULL, NULL, NULL, NULL
      FROM verdict v, doc d WHERE v.status = 'empty'
    UNION ALL
    (SELECT v.status, d.id, d.title, d.source_uri, d.n, v.tokens,
            p.id, p.chunk_index, p.chunk_index, p.heading_path, p.content, p.token_count
       FROM verdict v, doc d, part p WHERE v.status = 'chunks'
      ORDER BY p.chunk_index)
    UNION ALL
    (SELECT v.status, d.id, d.title, d.source_uri, d.n, v.tokens,
            NULL, s.first_index, s.last_index, s.heading_path, NULL, s.tokens
       FROM verdict v, doc d, sections s WHERE v.status = 'outline'
      ORDER BY s.first_index, s.ord);
$$;

COMMENT ON FUNCTION kb.read_document(uuid, integer, integer, integer) IS
'Budget-guarded reader: the chunks of a document (or of chunk_start..chunk_end) in order when they fit token_budget (status chunks), otherwise only the outline: headings with chunk ranges and tokens (status outline); also empty, not_found. Maximum: token_budget 100000 (NULL or larger values act as 100000).';

REVOKE ALL ON FUNCTION kb.read_document(uuid, integer, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.read_document(uuid, integer, integer, integer) TO kb_reader;
    END IF;
END
$$;
