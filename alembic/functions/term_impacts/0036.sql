-- kb.term_impacts(tsv tsvector) -> TABLE (lexeme text, impact real)
--
-- Each lexeme of tsv with its impact: the BM25 term-frequency part of its score in that chunk,
--     impact = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / 80)),  k1 = 0.9, b = 0.75,
-- tf = its positions in tsv (1 when it has none), dl = length(tsv) (distinct lexemes), and 80 a
-- fixed typical chunk length in distinct lexemes. kb.term_postings keeps the common lexemes'
-- postings ordered by it, so kb.keyword_search can read a common word's best chunks first;
-- the final score is computed afresh (with the corpus's own average length and the caller's
-- k1, b), so the constants only decide the reading order. The same tsv always gives the same
-- impacts (the statistics trigger finds a posting again by them). The length term is computed
-- once per call (not once per lexeme: each read detoasts the whole tsvector, and its arithmetic
-- is numeric). kb.rebuild_keyword_stats computes the same expression set-wise (keep the two
-- equal). Pure (IMMUTABLE).
CREATE OR REPLACE FUNCTION kb.term_impacts(tsv tsvector)
RETURNS TABLE (lexeme text, impact real)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT t.lexeme, (f.tf * 1.9 / (f.tf + d.k))::real
      FROM (SELECT (0.9 * (0.25 + 0.75 * pg_catalog.length(tsv) / 80.0))::float8 AS k
            OFFSET 0) d,
           pg_catalog.unnest(tsv) AS t,
           LATERAL (SELECT coalesce(pg_catalog.array_length(t.positions, 1), 1)::float8 AS tf) f;
$$;

COMMENT ON FUNCTION kb.term_impacts(tsvector) IS
'The lexemes of a tsvector with their BM25 term-frequency impact (k1 0.9, b 0.75, reference length 80 distinct lexemes): the reading order of kb.term_postings.';
