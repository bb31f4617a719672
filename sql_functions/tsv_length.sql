-- kb.tsv_length(tsv tsvector) -> integer
--
-- The length of a text as BM25 counts it: the number of lexeme occurrences (positions) in its
-- tsvector, not the number of distinct lexemes that length(tsvector) returns. A lexeme stored
-- without positions counts once.
CREATE OR REPLACE FUNCTION kb.tsv_length(tsv tsvector)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
STRICT
SET search_path = kb, public, pg_temp
AS $$
    SELECT coalesce(sum(coalesce(array_length(l.positions, 1), 1)), 0)::integer
      FROM unnest(tsv) AS l;
$$;

COMMENT ON FUNCTION kb.tsv_length(tsvector) IS
'Number of lexeme occurrences (positions) in a tsvector: the document length BM25 uses.';
