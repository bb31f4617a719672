-- kb.hybrid_search(query_text text, query_embedding public.vector DEFAULT NULL, match_count integer DEFAULT 5,
--                  vector_candidates integer DEFAULT 20, keyword_candidates integer DEFAULT 20,
--                  rrf_k integer DEFAULT 10, vector_weight double precision DEFAULT 2.0,
--                  keyword_weight double precision DEFAULT 1.0, filters jsonb DEFAULT '{}',
--                  document_ids uuid[] DEFAULT NULL, min_similarity double precision DEFAULT NULL,
--                  model text DEFAULT NULL, keyword_ranking text DEFAULT 'bm25',
--                  max_per_document integer DEFAULT NULL,
--                  exact_keyword_weight double precision DEFAULT 3.0, ef_search integer DEFAULT NULL)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             score, vector_rank, vector_similarity, keyword_rank, keyword_score,
--             category, metadata, token_count)
--
-- Hybrid retrieval: the top vector_candidates chunks of kb.vector_search and the top
-- keyword_candidates chunks of kb.keyword_search (same filters, document_ids), fused by
-- weighted Reciprocal Rank Fusion:
--     score(chunk) = vector_weight / (rrf_k + vector_rank) + w_k / (rrf_k + keyword_rank)
-- with ranks counted from 1 in each list, and a chunk missing from a list contributing 0 for
-- that list. w_k is keyword_weight, or exact_keyword_weight when the query asks for exact
-- matching (kb.search_query(query_text).strict_first: a "quoted phrase" or an identifier-like
-- word such as 40P01 or work_mem), so those queries lean on the keyword leg and plain questions
-- on the vector leg. Returns the match_count best chunks, ordered by score descending, ties
-- broken by the better (smaller) of the two ranks, then by the smaller chunk_id: deterministic.
-- max_per_document keeps at most that many chunks of one document (its best ones), so several
-- chunks of one long page cannot crowd the other pages out of the match_count rows; NULL (the
-- default) keeps every chunk; values below 1 raise. ef_search is passed to kb.vector_search
-- (HNSW candidate list size; NULL: its default).
-- Each row carries both retrievers' ranks and raw scores (vector_similarity = cosine similarity,
-- keyword_score = BM25 or ts_rank, see keyword_ranking), NULL where a chunk was not in that list,
-- so a caller can judge how strong the evidence is. query_embedding NULL means keyword-only
-- (a person in psql can search with text alone). min_similarity drops vector hits below it;
-- model selects the embedding model (default: the active one); wrong dimension or unknown model
-- raise. Any query_text returns rows or no rows, never an error. Reads only (STABLE), so it runs
-- on hot standbys. PARALLEL UNSAFE like kb.vector_search (it sets hnsw.ef_search).
-- Bounded work whatever the caller passes: match_count, vector_candidates and keyword_candidates
-- are clamped to 1,000 (larger values act as 1,000), ef_search as kb.vector_search clamps it;
-- the fusion is computed in double precision, so rrf_k up to 2,147,483,647 gives scores, never
-- "integer out of range".
CREATE OR REPLACE FUNCTION kb.hybrid_search(
    query_text text,
    query_embedding public.vector DEFAULT NULL,
    match_count integer DEFAULT 5,
    vector_candidates integer DEFAULT 20,
    keyword_candidates integer DEFAULT 20,
    rrf_k integer DEFAULT 10,
    vector_weight double precision DEFAULT 2.0,
    keyword_weight double precision DEFAULT 1.0,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    min_similarity double precision DEFAULT NULL,
    model text DEFAULT NULL,
    keyword_ranking text DEFAULT 'bm25',
    max_per_document integer DEFAULT NULL,
    exact_keyword_weight double precision DEFAULT 3.0,
    ef_search integer DEFAULT NULL)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    title text,
    source_uri text,
    chunk_index integer,
    heading_path text,
    content text,
    score double precision,
    vector_rank integer,
    vector_similarity double precision,
    keyword_rank integer,
    keyword_score double precision,
    category text,
    metadata jsonb,
    token_count integer)
LANGUAGE plpgsql
STABLE
PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF rrf_k IS NULL OR rrf_k < 0 THEN
        RAISE EXCEPTION 'rrf_k must be >= 0, got %', coalesce(rrf_k::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF vector_weight IS NULL OR vector_weight < 0 OR keyword_weight IS NULL OR keyword_weight < 0
            OR exact_keyword_weight IS NULL OR exact_keyword_weight < 0 THEN
        RAISE EXCEPTION 'weights must be >= 0, got vector_weight=%, keyword_weight=%, exact_keyword_weight=%',
            vector_weight, keyword_weight, exact_keyword_weight
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- documented maxima (see COMMENT ON): a caller cannot ask for unbounded work
    match_count := least(match_count, 1000);
    vector_candidates := least(vector_candidates, 1000);
    keyword_candidates := least(keyword_candidates, 1000);
    IF max_per_document IS NOT NULL AND max_per_document < 1 THEN
        RAISE EXCEPTION 'max_per_document must be >= 1 or NULL, got %', max_per_document
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT sq.strict_first FROM kb.search_query(query_text) AS sq) THEN
        keyword_weight := exact_keyword_weight;
    END IF;
    RETURN QUERY
    WITH v AS (
        SELECT vs.chunk_id, vs.document_id, vs.rank, vs.similarity
          FROM kb.vector_search(query_embedding, vector_candidates, filters, document_ids,
                                min_similarity, model, ef_search) AS vs
    ),
    k AS (
        SELECT ks.chunk_id, ks.document_id, ks.rank, ks.score
          FROM kb.keyword_search(query_text, keyword_candidates, filters, document_ids,
                                 keyword_ranking) AS ks
    ),
    fused AS (
        SELECT coalesce(v.chunk_id, k.chunk_id) AS id,
               coalesce(v.document_id, k.document_id) AS doc,
               coalesce(vector_weight / (rrf_k::double precision + v.rank), 0)
                 + coalesce(keyword_weight / (rrf_k::double precision + k.rank), 0) AS score,
               v.rank AS v_rank, v.similarity AS v_sim, k.rank AS k_rank, k.score AS k_score
          FROM v FULL JOIN k ON k.chunk_id = v.chunk_id
    ),
    placed AS (
        SELECT fu.*,
               row_number() OVER (PARTITION BY fu.doc
                                  ORDER BY fu.score DESC, least(fu.v_rank, fu.k_rank), fu.id) AS nth
          FROM fused fu
    ),
    top AS (
        SELECT p.id, p.score, p.v_rank, p.v_sim, p.k_rank, p.k_score
          FROM placed p
         WHERE max_per_document IS NULL OR p.nth <= max_per_document
         ORDER BY p.score DESC, least(p.v_rank, p.k_rank), p.id
         LIMIT greatest(coalesce(match_count, 0), 0)
    )
    SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path, c.content,
           t.score, t.v_rank, t.v_sim, t.k_rank, t.k_score, d.category, d.metadata, c.token_count
      FROM top t
      JOIN kb.chunks c ON c.id = t.id
      JOIN kb.documents d ON d.id = c.document_id
     ORDER BY t.score DESC, least(t.v_rank, t.k_rank), t.id;
END;
$$;

COMMENT ON FUNCTION kb.hybrid_search(text, public.vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text, integer, double precision, integer) IS
'Hybrid retrieval by Reciprocal Rank Fusion of kb.vector_search and kb.keyword_search: score = vector_weight/(rrf_k + vector_rank) + w/(rrf_k + keyword_rank) with w = keyword_weight, or exact_keyword_weight when kb.search_query marks the query strict_first (quotes, identifiers); ranks from 1, a chunk missing from a list adds 0, ties by the better rank then chunk_id; at most max_per_document chunks per document (NULL: no cap); ef_search passed to kb.vector_search. NULL query_embedding = keyword only. Returns both retrievers'' ranks and raw scores. Maxima: match_count, vector_candidates and keyword_candidates 1000 (larger values act as 1000); any rrf_k >= 0.';

REVOKE ALL ON FUNCTION kb.hybrid_search(text, public.vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text, integer, double precision, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.hybrid_search(text, public.vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text, integer, double precision, integer) TO kb_reader;
    END IF;
END
$$;
