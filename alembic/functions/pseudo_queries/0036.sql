-- kb.pseudo_queries(sample_size integer DEFAULT 200) -> TABLE (chunk_id bigint, query text)
--
-- Random in-corpus queries, for measuring what a query that the corpus does answer scores: up
-- to sample_size chunks of more than 200 characters and at least 14 words, picked in a fixed
-- pseudo-random order (md5 of the chunk id, so the same corpus gives the same sample), and from
-- each a run of 10 consecutive words starting at a position also fixed by the chunk id. The
-- abstention gate embeds them, records the similarity of each one's best vector hit, and judges
-- a question's best similarity against that distribution (loader.answer.abstention.profile):
-- a threshold on the relative similarity travels between corpora and embedding models where
-- one on the raw cosine does not. sample_size is clamped to 0..1,000. Reads only (STABLE).
-- Only chunks of the caller's collections (kb.collection_scope) are sampled.
CREATE OR REPLACE FUNCTION kb.pseudo_queries(sample_size integer DEFAULT 200)
RETURNS TABLE (chunk_id bigint, query text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH picked AS (
        SELECT c.id, pg_catalog.regexp_split_to_array(pg_catalog.btrim(c.content), '\s+') AS words
          FROM kb.chunks c
          JOIN kb.documents d ON d.id = c.document_id
         WHERE pg_catalog.length(c.content) > 200
           AND coalesce(d.collection = ANY ((SELECT kb.collection_scope(NULL))::text[]), true)
         ORDER BY pg_catalog.md5('pgkb-profile:' || c.id::text), c.id
         LIMIT least(greatest(coalesce(sample_size, 0), 0), 1000)
    )
    SELECT p.id,
           pg_catalog.array_to_string(p.words[s.first : s.first + 9], ' ')
      FROM picked p,
           LATERAL (SELECT 1 + (('x' || pg_catalog.substr(pg_catalog.md5(p.id::text), 1, 7))::bit(28)::integer
                                % (pg_catalog.cardinality(p.words) - 9)) AS first) s
     WHERE pg_catalog.cardinality(p.words) >= 14
     ORDER BY pg_catalog.md5('pgkb-profile:' || p.id::text), p.id;
$$;

COMMENT ON FUNCTION kb.pseudo_queries(integer) IS
'Random in-corpus pseudo-queries (10 consecutive words of up to sample_size chunks, a fixed pseudo-random sample): the abstention gate measures the similarity distribution of queries the corpus answers from them. sample_size clamped to 0..1000.';

REVOKE ALL ON FUNCTION kb.pseudo_queries(integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.pseudo_queries(integer) TO kb_reader;
    END IF;
END
$$;
