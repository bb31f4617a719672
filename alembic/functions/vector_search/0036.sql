-- kb.vector_search(query_embedding public.vector, match_count integer DEFAULT 20, filters jsonb DEFAULT '{}',
--                  document_ids uuid[] DEFAULT NULL, min_similarity double precision DEFAULT NULL,
--                  model text DEFAULT NULL, ef_search integer DEFAULT NULL)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             rank integer, similarity double precision)
--
-- The vector retriever: the match_count chunks nearest to query_embedding by cosine distance,
-- among the embeddings of one model: `model` (a registered model name) or, when NULL, the active
-- model. similarity = 1 - cosine distance; rank counts from 1; ties by chunk_id. The query runs
-- through the model's partial HNSW index embeddings_hnsw_model_<id> (its ORDER BY is exactly
-- `embedding::vector(<dims>) <=> query` with `model_id = <id>`), with pgvector 0.8's iterative
-- index scan (hnsw.iterative_scan = relaxed_order, then re-sorted exactly) and hnsw.ef_search =
-- kb.hnsw_ef_search(model, match_count, ef_search): ef_search, or (NULL) max(the index's own
-- ef_search, 2 * match_count) up to 1000, where the index's own is what kb.build_model_index
-- recorded in kb.vector_indexes for the corpus it was built on (kb.hnsw_parameters; 200 for an
-- index with no record), set for this call only: a selective filter
-- still returns match_count rows when that many chunks pass it. (pgvector's own default, 40,
-- misses about one in twenty of the exact top 20 on 384-dimension sentence vectors.)
-- filters: see kb.search_filters (category, metadata, source, collections); document_ids restricts to those
-- documents; min_similarity drops hits below it (ranks count the kept ones). Filter values are
-- bound parameters, never SQL text. A NULL query_embedding returns no rows. An embedding whose
-- dimension differs from the model's, an unknown model, or no registered model raises an error
-- naming both (PK012, PK010, PK011). Reads only (STABLE); PARALLEL UNSAFE because it sets hnsw.ef_search, which
-- PostgreSQL refuses during a parallel query. match_count is clamped to 1,000 and ef_search to
-- 40..1,000 (larger values act as the maximum).
CREATE OR REPLACE FUNCTION kb.vector_search(
    query_embedding public.vector,
    match_count integer DEFAULT 20,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    min_similarity double precision DEFAULT NULL,
    model text DEFAULT NULL,
    ef_search integer DEFAULT NULL)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    title text,
    source_uri text,
    chunk_index integer,
    heading_path text,
    content text,
    rank integer,
    similarity double precision)
LANGUAGE plpgsql
STABLE
PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'
SET hnsw.ef_search = '40'
AS $$
DECLARE
    f record;
    m record;
    query_dims integer;
    conditions text := '';
BEGIN
    f := kb.search_filters(filters);
    IF query_embedding IS NULL THEN
        RETURN;
    END IF;
    query_dims := public.vector_dims(query_embedding);
    IF model IS NULL THEN
        SELECT em.id, em.name, em.dims INTO m FROM kb.embedding_models em WHERE em.is_active;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no embedding model is registered, so there is nothing to search by vector'
                USING ERRCODE = 'PK011',
                      HINT = 'ingest documents first (which registers the model), or search by keyword';
        END IF;
    ELSE
        SELECT em.id, em.name, em.dims INTO m
          FROM kb.embedding_models em
         WHERE em.name = model
         ORDER BY (em.dims = query_dims) DESC, em.is_active DESC, em.id
         LIMIT 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'embedding model % is not registered in this knowledge base (registered: %)',
                quote_literal(model),
                coalesce((SELECT string_agg(format('%s (%s dims%s)', em.name, em.dims,
                                                   CASE WHEN em.is_active THEN ', active' ELSE '' END),
                                            ', ' ORDER BY em.id)
                            FROM kb.embedding_models em), 'none')
                USING ERRCODE = 'PK010',
                      HINT = 'embed the question with the model the chunks were embedded with';
        END IF;
    END IF;
    IF query_dims <> m.dims THEN
        RAISE EXCEPTION 'query embedding has % dimensions, but model % (id %) has % dimensions',
            query_dims, m.name, m.id, m.dims
            USING ERRCODE = 'PK012',
                  HINT = 'embed the question with the same model as the chunks';
    END IF;
    IF match_count IS NULL OR match_count < 1 THEN
        RETURN;
    END IF;
    match_count := least(match_count, 1000);  -- the documented maximum

    PERFORM set_config('hnsw.ef_search',
                       kb.hnsw_ef_search(m.id, match_count, ef_search)::text,
                       true);

    -- fixed condition texts; the values are bound as $3..$6 and $8
    IF f.category IS NOT NULL THEN
        conditions := conditions || ' AND d.category = ANY ($3)';
    END IF;
    IF f.metadata IS NOT NULL THEN
        conditions := conditions || ' AND d.metadata @> $4';
    END IF;
    IF f.source_pattern IS NOT NULL THEN
        conditions := conditions || ' AND d.source_uri LIKE $5';
    END IF;
    IF document_ids IS NOT NULL THEN
        conditions := conditions || ' AND c.document_id = ANY ($6)';
    END IF;
    IF f.collections IS NOT NULL THEN  -- the caller's collections (kb.search_filters)
        conditions := conditions || ' AND d.collection = ANY ($8)';
    END IF;

    RETURN QUERY EXECUTE format(
        $q$
        WITH nearest AS MATERIALIZED (
            SELECT e.chunk_id, e.embedding::public.vector(%1$s) OPERATOR(public.<=>) $1 AS distance
              FROM kb.embeddings e
              JOIN kb.chunks c ON c.id = e.chunk_id
              JOIN kb.documents d ON d.id = c.document_id
             WHERE e.model_id = %2$s%3$s
             ORDER BY e.embedding::public.vector(%1$s) OPERATOR(public.<=>) $1
             LIMIT $2
        ),
        kept AS (
            SELECT n.chunk_id, 1 - n.distance AS similarity
              FROM nearest n
             WHERE $7::double precision IS NULL OR 1 - n.distance >= $7
        )
        SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path,
               c.content,
               (row_number() OVER (ORDER BY k.similarity DESC, k.chunk_id))::integer,
               k.similarity
          FROM kept k
          JOIN kb.chunks c ON c.id = k.chunk_id
          JOIN kb.documents d ON d.id = c.document_id
         ORDER BY k.similarity DESC, k.chunk_id
        $q$, m.dims, m.id, conditions)
    USING query_embedding, match_count, f.category, f.metadata, f.source_pattern, document_ids,
          min_similarity, f.collections;
END;
$$;

COMMENT ON FUNCTION kb.vector_search(public.vector, integer, jsonb, uuid[], double precision, text, integer) IS
'Vector retriever: nearest chunks by cosine distance through the model''s partial HNSW index with iterative scan (filters still return match_count rows) and ef_search (default max(the index''s recorded ef_search, 2 * match_count), kb.vector_indexes); rank from 1, similarity = 1 - distance; wrong dims/model raise. Maxima: match_count 1000, ef_search 1000.';

REVOKE ALL ON FUNCTION kb.vector_search(public.vector, integer, jsonb, uuid[], double precision, text, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.vector_search(public.vector, integer, jsonb, uuid[], double precision, text, integer) TO kb_reader;
    END IF;
END
$$;
