-- kb.keyword_search(query_text text, match_count integer DEFAULT 20, filters jsonb DEFAULT '{}',
--                   document_ids uuid[] DEFAULT NULL, keyword_ranking text DEFAULT 'bm25',
--                   bm25_k1 double precision DEFAULT 1.2, bm25_b double precision DEFAULT 0.75,
--                   heading_weight double precision DEFAULT 1.0)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             rank integer, score double precision, strict_match boolean)
--
-- The keyword retriever: full-text search over kb.chunks.tsv (GIN index chunks_tsv_idx).
-- Candidates are the chunks containing ANY positive lexeme of the question (OR semantics:
-- natural-language questions rarely contain all their words); chunks containing a -negated
-- word are dropped. Ranking, best first:
--   1. chunks matching the strict websearch_to_tsquery query (every word, "quoted phrases" as
--      phrases; so exact identifiers such as "40P01" or maintenance_work_mem find their pages
--      first), then the others;
--   2. within each group, by score:
--      keyword_ranking 'bm25' (default): Okapi BM25 over chunk statistics kept by ingestion
--        (kb.term_stats, kb.corpus_stats):
--          score = sum over query lexemes t of idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
--          idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), N = chunk count, df = chunks containing t,
--          tf = occurrences of t in the content + heading_weight * occurrences in the heading path,
--          dl = lexeme occurrences in the chunk (kb.tsv_length), avgdl = total_length / N;
--      keyword_ranking 'ts_rank': PostgreSQL's ts_rank(tsv, OR-query) (no IDF, no length norm);
--   3. ties by chunk_id.
-- rank counts from 1. filters: see kb.search_filters (category, metadata, source); document_ids
-- restricts to those documents. Any query_text returns rows or no rows, never an error; an
-- unknown keyword_ranking or filter key raises. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.keyword_search(
    query_text text,
    match_count integer DEFAULT 20,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    keyword_ranking text DEFAULT 'bm25',
    bm25_k1 double precision DEFAULT 1.2,
    bm25_b double precision DEFAULT 0.75,
    heading_weight double precision DEFAULT 1.0)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    title text,
    source_uri text,
    chunk_index integer,
    heading_path text,
    content text,
    rank integer,
    score double precision,
    strict_match boolean)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    q record;
    f record;
    n_chunks double precision;
    avgdl double precision;
    use_bm25 boolean;
    filtered boolean;
BEGIN
    IF keyword_ranking IS NULL OR keyword_ranking NOT IN ('bm25', 'ts_rank') THEN
        RAISE EXCEPTION 'unknown keyword_ranking %; valid values are: bm25, ts_rank',
            coalesce(quote_literal(keyword_ranking), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF bm25_k1 IS NULL OR bm25_k1 < 0 OR bm25_b IS NULL OR bm25_b < 0 OR bm25_b > 1
       OR heading_weight IS NULL OR heading_weight < 0 THEN
        RAISE EXCEPTION 'invalid BM25 parameters k1=%, b=%, heading_weight=%', bm25_k1, bm25_b, heading_weight
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'k1 >= 0, 0 <= b <= 1, heading_weight >= 0';
    END IF;
    f := kb.search_filters(filters);
    IF match_count IS NULL OR match_count < 1 THEN
        RETURN;
    END IF;
    q := kb.search_query(query_text);
    IF q.any_query IS NULL THEN
        RETURN;
    END IF;
    use_bm25 := keyword_ranking = 'bm25';
    filtered := f.category IS NOT NULL OR f.metadata IS NOT NULL OR f.source_pattern IS NOT NULL;
    SELECT greatest(s.chunk_count, 1)::double precision,
           greatest(s.total_length, 1)::double precision / greatest(s.chunk_count, 1)
      INTO n_chunks, avgdl
      FROM kb.corpus_stats s;

    RETURN QUERY
    WITH terms AS (
        SELECT l.lexeme,
               ln(1 + (n_chunks - coalesce(ts.df, 0) + 0.5) / (coalesce(ts.df, 0) + 0.5)) AS idf
          FROM unnest(q.lexemes) AS l(lexeme)
          LEFT JOIN kb.term_stats ts ON ts.lexeme = l.lexeme
    ),
    matched AS (
        SELECT c.id, c.tsv, (q.strict_query IS NOT NULL AND c.tsv @@ q.strict_query) AS strict
          FROM kb.chunks c
         WHERE c.tsv @@ q.any_query
           AND (q.excluded IS NULL OR NOT c.tsv @@ q.excluded)
           AND (document_ids IS NULL OR c.document_id = ANY (document_ids))
           AND (NOT filtered OR EXISTS (
                   SELECT 1 FROM kb.documents d
                    WHERE d.id = c.document_id
                      AND (f.category IS NULL OR d.category = ANY (f.category))
                      AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                      AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)))
    ),
    scored AS (
        SELECT m.id, m.strict,
               CASE WHEN use_bm25 THEN (
                   SELECT coalesce(sum(t.idf * x.tf * (bm25_k1 + 1)
                                       / (x.tf + bm25_k1 * (1 - bm25_b + bm25_b * len.dl / avgdl))), 0)
                     FROM (SELECT u.lexeme,
                                  (SELECT sum(CASE WHEN w = 'A' THEN heading_weight ELSE 1 END)
                                     FROM unnest(u.weights) AS w) AS tf
                             FROM unnest(m.tsv) AS u
                            WHERE u.lexeme = ANY (q.lexemes)) x
                     JOIN terms t ON t.lexeme = x.lexeme
                     CROSS JOIN (SELECT sum(coalesce(array_length(v.positions, 1), 1))::double precision AS dl
                                   FROM unnest(m.tsv) AS v) len
                    WHERE x.tf > 0)
               ELSE ts_rank(m.tsv, q.any_query)::double precision
               END AS score
          FROM matched m
    ),
    ranked AS (
        SELECT s.id, s.score, s.strict,
               row_number() OVER (ORDER BY s.strict DESC, s.score DESC, s.id)::integer AS rank
          FROM scored s
         ORDER BY s.strict DESC, s.score DESC, s.id
         LIMIT match_count
    )
    SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path, c.content,
           r.rank, r.score, r.strict
      FROM ranked r
      JOIN kb.chunks c ON c.id = r.id
      JOIN kb.documents d ON d.id = c.document_id
     ORDER BY r.rank;
END;
$$;

COMMENT ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision) IS
'Keyword retriever: OR-of-lexemes candidates, strict websearch_to_tsquery matches first, then BM25 (k1, b, IDF from kb.term_stats) or ts_rank; rank from 1, ties by chunk_id. Never errors on any query text.';

REVOKE ALL ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision) TO kb_reader;
    END IF;
END
$$;
