-- kb.hnsw_ef_search(model_id integer, match_count integer, ef_search integer DEFAULT NULL)
--   -> integer
--
-- The hnsw.ef_search kb.vector_search walks a model's index with: ef_search when given; else the
-- larger of the ef_search recorded with the model's index when it was built (kb.vector_indexes,
-- sized for its corpus by kb.hnsw_parameters; 200 when the index has no record) and
-- 2 * match_count; clamped to 40..1,000 (pgvector's range as pgkb uses it). So the search
-- follows the index it searches: a denser index built for a large corpus is searched deeper.
-- Never raises. STABLE (reads kb.vector_indexes).
CREATE OR REPLACE FUNCTION kb.hnsw_ef_search(
    model_id integer,
    match_count integer,
    ef_search integer DEFAULT NULL)
RETURNS integer
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT least(1000, greatest(40, coalesce(
               hnsw_ef_search.ef_search::bigint,
               greatest(coalesce((SELECT vi.ef_search FROM kb.vector_indexes vi
                                   WHERE vi.model_id = hnsw_ef_search.model_id), 200),
                        2::bigint * coalesce(hnsw_ef_search.match_count, 0)))))::integer;
$$;

COMMENT ON FUNCTION kb.hnsw_ef_search(integer, integer, integer) IS
'The hnsw.ef_search of a search through a model''s index: ef_search if given, else max(the index''s recorded ef_search (kb.vector_indexes; 200 without a record), 2 * match_count), within 40..1000.';

REVOKE ALL ON FUNCTION kb.hnsw_ef_search(integer, integer, integer) FROM PUBLIC;
