-- kb.hnsw_parameters(embedding_count bigint)
--   -> (m integer, ef_construction integer, ef_search integer, tier text)
--
-- The HNSW parameters pgkb builds a model's index with and searches it at, chosen from the number
-- of the model's embeddings when the index is (re)built (kb.build_model_index with no explicit
-- parameters: a new model, the rebuild after a bulk load, kb.resize_model_index from
-- `pgkb db reindex` and `pgkb models activate`). Two tiers:
--   fewer than 250,000 embeddings ('small'):  m 16, ef_construction 64,  ef_search 200
--                                             (pgvector's graph; the build stays as fast as ever)
--   250,000 or more ('large'):                m 48, ef_construction 200, ef_search 400
--                                             (a denser graph, for recall@20 of 0.98 or more at
--                                             a million embeddings, searched at 400: recall and
--                                             search time both better than m 32 at 800)
-- The measurements behind the tiers are in the scaling guide. NULL or a negative count is taken
-- as 0. Pure (IMMUTABLE): the thresholds are part of the function, changed by a migration.
CREATE OR REPLACE FUNCTION kb.hnsw_parameters(
    embedding_count bigint,
    OUT m integer,
    OUT ef_construction integer,
    OUT ef_search integer,
    OUT tier text)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN coalesce(embedding_count, 0) >= 250000 THEN 48 ELSE 16 END,
           CASE WHEN coalesce(embedding_count, 0) >= 250000 THEN 200 ELSE 64 END,
           CASE WHEN coalesce(embedding_count, 0) >= 250000 THEN 400 ELSE 200 END,
           CASE WHEN coalesce(embedding_count, 0) >= 250000 THEN 'large' ELSE 'small' END;
$$;

COMMENT ON FUNCTION kb.hnsw_parameters(bigint) IS
'HNSW parameters for a model index of embedding_count vectors: below 250,000 m 16 / ef_construction 64 / ef_search 200 (small), from 250,000 m 48 / ef_construction 200 / ef_search 400 (large).';

REVOKE ALL ON FUNCTION kb.hnsw_parameters(bigint) FROM PUBLIC;
