-- kb.hybrid_search(query_text text, query_embedding public.vector DEFAULT NULL, match_count integer DEFAULT 5,
--                  vector_candidates integer DEFAULT 20, keyword_candidates integer DEFAULT 20,
--                  rrf_k integer DEFAULT 10, vector_weight double precision DEFAULT 2.0,
--                  keyword_weight double precision DEFAULT 1.5, filters jsonb DEFAULT '{}',
--                  document_ids uuid[] DEFAULT NULL, min_similarity double precision DEFAULT NULL,
--                  model text DEFAULT NULL, keyword_ranking text DEFAULT 'bm25',
--                  max_per_document integer DEFAULT NULL,
--                  exact_keyword_weight double precision DEFAULT 3.0, ef_search integer DEFAULT NULL,
--                  keyword_confidence double precision DEFAULT 2.0, lead_slot integer DEFAULT 3)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             score, vector_rank, vector_similarity, keyword_rank, keyword_score,
--             category, metadata, token_count)
--
-- Hybrid retrieval: the top vector_candidates chunks of kb.vector_search and the top
-- keyword_candidates chunks of kb.keyword_search (same filters, document_ids), fused by
-- weighted Reciprocal Rank Fusion:
--     score(chunk) = vector_weight / (rrf_k + vector_rank) + w_k / (rrf_k + keyword_rank)
-- with ranks counted from 1 in each list, and a chunk missing from a list contributing 0 for
-- that list. w_k is exact_keyword_weight when the query asks for exact matching
-- (kb.search_query(query_text).strict_first: a "quoted phrase" or an identifier-like word such
-- as 40P01 or work_mem), so those queries lean on the keyword leg. For a plain question
--     w_k = keyword_weight * share ^ keyword_confidence
-- where share is the keyword leg's own evidence: the share of the query's IDF mass (BM25 IDF of
-- each positive lexeme in the collections searched, as the keyword leg ranks) that its best chunk contains. When that
-- chunk holds all the query's rare words the leg weighs in fully (1.5 against the vector leg's
-- 2 by default); when it matched only common words (a paraphrase whose key words the corpus
-- writes otherwise, or a word the corpus never uses) the leg steps back quickly (the square of
-- the share by default: a half share weighs 1.5 * 0.25) and the vector leg decides.
-- keyword_confidence = 0 turns this off (w_k = keyword_weight).
-- Lead slots: each leg's best chunk is guaranteed a place among the first lead_slot rows when
-- that leg is confident: the vector leg's rank-1 chunk always, the keyword leg's rank-1 chunk
-- when the query asks for exact matching or its share is at least one half. A lead chunk that
-- the fused score ranks below lead_slot is placed just before the row at lead_slot (both leads,
-- when both are below it, in fused order), and reports the score of that row, so scores never
-- rise down the list. With vector weight 2 a keyword-only chunk scores at most w_k/(rrf_k + 1),
-- below the vector leg's first dozen chunks: without the slot, a page only the keyword leg
-- finds (a word the embedding model does not know, an acronym) could not reach the top rows.
-- lead_slot NULL or 0 turns this off (pure weighted RRF); values below 0 raise, values above
-- 1,000 act as 1,000. Returns the match_count best chunks in that order, ties broken by the
-- better (smaller) of the two ranks, then by the smaller chunk_id: deterministic.
-- max_per_document keeps at most that many chunks of one document (its best ones), so several
-- chunks of one long page cannot crowd the other pages out of the match_count rows; NULL (the
-- default) keeps every chunk; values below 1 raise. A weight that is negative, NULL, NaN or
-- infinite raises (PK001, invalid argument). ef_search is passed to kb.vector_search
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
-- The fusion's statement is planned once per session (plan_cache_mode force_generic_plan): a
-- plan made afresh for each call cost more than the fusion itself.
CREATE OR REPLACE FUNCTION kb.hybrid_search(
    query_text text,
    query_embedding public.vector DEFAULT NULL,
    match_count integer DEFAULT 5,
    vector_candidates integer DEFAULT 20,
    keyword_candidates integer DEFAULT 20,
    rrf_k integer DEFAULT 10,
    vector_weight double precision DEFAULT 2.0,
    keyword_weight double precision DEFAULT 1.5,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    min_similarity double precision DEFAULT NULL,
    model text DEFAULT NULL,
    keyword_ranking text DEFAULT 'bm25',
    max_per_document integer DEFAULT NULL,
    exact_keyword_weight double precision DEFAULT 3.0,
    ef_search integer DEFAULT NULL,
    keyword_confidence double precision DEFAULT 2.0,
    lead_slot integer DEFAULT 3)
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
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    exact_query boolean;
    q record;
    scope text[];
    n_chunks double precision;
BEGIN
    IF rrf_k IS NULL OR rrf_k < 0 THEN
        RAISE EXCEPTION 'rrf_k must be >= 0, got %', coalesce(rrf_k::text, 'NULL')
            USING ERRCODE = 'PK001';
    END IF;
    -- finite and >= 0: NaN sorts above every number in PostgreSQL, so "NaN < 0" is false and a
    -- NaN weight would make every score NaN (the order arbitrary); NULL fails the test too
    IF NOT (vector_weight >= 0 AND vector_weight < 'Infinity'::double precision
            AND keyword_weight >= 0 AND keyword_weight < 'Infinity'::double precision
            AND exact_keyword_weight >= 0
            AND exact_keyword_weight < 'Infinity'::double precision) IS TRUE THEN
        RAISE EXCEPTION 'weights must be finite and >= 0, got vector_weight=%, keyword_weight=%, exact_keyword_weight=%',
            vector_weight, keyword_weight, exact_keyword_weight
            USING ERRCODE = 'PK001';
    END IF;
    IF keyword_confidence IS NULL OR keyword_confidence < 0 OR keyword_confidence > 100 THEN
        RAISE EXCEPTION 'keyword_confidence must be between 0 and 100, got %',
            coalesce(keyword_confidence::text, 'NULL')
            USING ERRCODE = 'PK001';
    END IF;
    -- documented maxima (see COMMENT ON): a caller cannot ask for unbounded work
    match_count := least(match_count, 1000);
    vector_candidates := least(vector_candidates, 1000);
    keyword_candidates := least(keyword_candidates, 1000);
    IF max_per_document IS NOT NULL AND max_per_document < 1 THEN
        RAISE EXCEPTION 'max_per_document must be >= 1 or NULL, got %', max_per_document
            USING ERRCODE = 'PK001';
    END IF;
    IF lead_slot < 0 THEN
        RAISE EXCEPTION 'lead_slot must be >= 0 or NULL, got %', lead_slot
            USING ERRCODE = 'PK001';
    END IF;
    lead_slot := least(coalesce(lead_slot, 0), 1000);
    q := kb.search_query(query_text);
    exact_query := coalesce(q.strict_first, false);
    -- the collections searched, whose statistics the keyword evidence reads (as the keyword
    -- leg's): the caller's scope of the filters' collections
    scope := (kb.search_filters(filters)).collections;
    SELECT greatest(coalesce(sum(s.chunk_count), 0), 1)::double precision INTO n_chunks
      FROM kb.collection_stats s
     WHERE scope IS NULL OR s.collection = ANY (scope);
    IF exact_query THEN
        keyword_weight := exact_keyword_weight;
        keyword_confidence := 0;
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
    -- BM25 IDF of the query's positive lexemes in the collections searched, the statistics
    -- the keyword leg ranks with
    terms AS (
        SELECT l.lexeme,
               ln(1 + (n_chunks - coalesce(sum(ts.df), 0) + 0.5) / (coalesce(sum(ts.df), 0) + 0.5)) AS idf
          FROM unnest(q.lexemes) AS l(lexeme)
          LEFT JOIN kb.collection_term_stats ts
            ON ts.lexeme = l.lexeme AND (scope IS NULL OR ts.collection = ANY (scope))
         GROUP BY l.lexeme
    ),
    -- the keyword leg's evidence: the IDF share of the query's lexemes its best chunk holds
    -- (materialized: w reads it twice, and an inlined share would be computed twice)
    share AS MATERIALIZED (
        SELECT coalesce(
                   (SELECT sum(t.idf) FILTER (WHERE t.lexeme = ANY (tsvector_to_array(c.tsv)))
                           / nullif(sum(t.idf), 0)
                      FROM terms t, kb.chunks c
                     WHERE c.id = (SELECT k1.chunk_id FROM k AS k1 ORDER BY k1.rank LIMIT 1)),
                   0) AS s
    ),
    -- the keyword leg's weight for this query (keyword_weight times the share to the power
    -- keyword_confidence) and whether its best chunk earns a lead slot
    w AS (
        SELECT CASE WHEN keyword_confidence = 0 THEN keyword_weight
                    ELSE keyword_weight * power(sh.s, keyword_confidence)
               END AS kw,
               (exact_query OR sh.s >= 0.5) AS keyword_leads
          FROM share sh
    ),
    fused AS (
        SELECT coalesce(v.chunk_id, k.chunk_id) AS id,
               coalesce(v.document_id, k.document_id) AS doc,
               coalesce(vector_weight / (rrf_k::double precision + v.rank), 0)
                 + coalesce(w.kw / (rrf_k::double precision + k.rank), 0) AS score,
               v.rank AS v_rank, v.similarity AS v_sim, k.rank AS k_rank, k.score AS k_score
          FROM v FULL JOIN k ON k.chunk_id = v.chunk_id CROSS JOIN w
    ),
    placed AS (
        SELECT fu.*,
               row_number() OVER (PARTITION BY fu.doc
                                  ORDER BY fu.score DESC, least(fu.v_rank, fu.k_rank), fu.id) AS nth
          FROM fused fu
    ),
    kept AS (
        SELECT p.*,
               row_number() OVER (ORDER BY p.score DESC, least(p.v_rank, p.k_rank), p.id) AS pos
          FROM placed p
         WHERE max_per_document IS NULL OR p.nth <= max_per_document
    ),
    -- a confident leg's best chunk ranked below lead_slot goes just before the row at lead_slot
    lifted AS (
        SELECT kp.*,
               (lead_slot > 0 AND kp.pos > lead_slot
                AND (kp.v_rank = 1 OR (kp.k_rank = 1 AND w.keyword_leads))) AS lift
          FROM kept kp CROSS JOIN w
    ),
    top AS (
        SELECT l.id, l.v_rank, l.v_sim, l.k_rank, l.k_score,
               CASE WHEN l.lift
                    THEN (SELECT greatest(l.score, kp.score) FROM kept kp WHERE kp.pos = lead_slot)
                    ELSE l.score END AS score,
               CASE WHEN l.lift THEN lead_slot - 0.5 ELSE l.pos END AS place,
               l.pos
          FROM lifted l
         ORDER BY place, l.pos
         LIMIT greatest(coalesce(match_count, 0), 0)
    )
    SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path, c.content,
           t.score, t.v_rank, t.v_sim, t.k_rank, t.k_score, d.category, d.metadata, c.token_count
      FROM top t
      JOIN kb.chunks c ON c.id = t.id
      JOIN kb.documents d ON d.id = c.document_id
     ORDER BY t.place, t.pos;
END;
$$;

COMMENT ON FUNCTION kb.hybrid_search(text, public.vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text, integer, double precision, integer, double precision, integer) IS
'Hybrid retrieval by Reciprocal Rank Fusion of kb.vector_search and kb.keyword_search: score = vector_weight/(rrf_k + vector_rank) + w/(rrf_k + keyword_rank) with w = exact_keyword_weight when kb.search_query marks the query strict_first (quotes, identifiers), else keyword_weight * share^keyword_confidence, share = the IDF share of the query''s lexemes held by the keyword leg''s best chunk (0: keyword_weight); lead slots: the vector leg''s best chunk, and the keyword leg''s when the query is strict_first or share >= 0.5, are placed within the first lead_slot rows (0 or NULL: off), carrying the score of the row they are placed before; ranks from 1, a chunk missing from a list adds 0, ties by the better rank then chunk_id; at most max_per_document chunks per document (NULL: no cap); ef_search passed to kb.vector_search. NULL query_embedding = keyword only. Returns both retrievers'' ranks and raw scores. Maxima: match_count, vector_candidates, keyword_candidates and lead_slot 1000 (larger values act as 1000); any rrf_k >= 0.';

REVOKE ALL ON FUNCTION kb.hybrid_search(text, public.vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text, integer, double precision, integer, double precision, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.hybrid_search(text, public.vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text, integer, double precision, integer, double precision, integer) TO kb_reader;
    END IF;
END
$$;
