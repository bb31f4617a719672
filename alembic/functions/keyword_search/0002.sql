-- kb.keyword_search(query_text text, match_count integer DEFAULT 20, filters jsonb DEFAULT '{}',
--                   document_ids uuid[] DEFAULT NULL, keyword_ranking text DEFAULT 'bm25',
--                   bm25_k1 double precision DEFAULT 0.9, bm25_b double precision DEFAULT 0.75,
--                   heading_weight double precision DEFAULT 1.0, max_postings integer DEFAULT 1000)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             rank integer, score double precision, strict_match boolean)
--
-- The keyword retriever: full-text search over kb.chunks.tsv (GIN index chunks_tsv_idx).
-- Candidates are the chunks containing ANY positive lexeme of the question (OR semantics:
-- natural-language questions rarely contain all their words); chunks containing a -negated
-- word are dropped. Ranking, best first:
--   1. when the text asks for exact matching (a "quoted phrase", or an identifier-like word such
--      as 40P01, pg_dump or maintenance_work_mem; see kb.search_query), the chunks matching the
--      strict websearch_to_tsquery query (every word, phrases as phrases) come first, so such
--      queries find their pages first; natural-language questions skip this step;
--   2. then chunks whose text holds every underscore identifier of the query as a whole word
--      (work_mem, not maintenance_work_mem, which the parser splits into the same lexemes);
--   3. within each group, by score:
--      keyword_ranking 'bm25' (default): Okapi BM25 over chunk statistics kept by ingestion
--        (kb.term_stats, kb.corpus_stats):
--          score = sum over query lexemes t of idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
--          idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), N = chunk count, df = chunks containing t,
--          tf = occurrences of t in the content + heading_weight * occurrences in the heading path,
--          dl = distinct lexemes in the chunk (length(tsv): read without expanding the tsvector),
--          avgdl = kb.corpus_stats.total_lexemes / N (the average of length(tsv));
--      keyword_ranking 'ts_rank': PostgreSQL's ts_rank(tsv, OR-query) (no IDF, no length norm);
--   4. ties by chunk_id.
-- Work bound: every candidate's tsv is read, so when the query's lexemes together occur in more
-- than max_postings chunks (sum of their df), the most common lexemes (highest df first) stop
-- generating candidates until the rest fit; they still count in every candidate's score, and
-- the rarest lexeme always generates. A chunk holding only such common words scores little.
-- NULL = no bound.
-- strict_match tells whether the chunk matches the strict query (whatever the ranking did with
-- it). rank counts from 1. filters: see kb.search_filters (category, metadata, source); document_ids
-- restricts to those documents. Any query_text returns rows or no rows, never an error; an
-- unknown keyword_ranking or filter key raises. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.keyword_search(
    query_text text,
    match_count integer DEFAULT 20,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    keyword_ranking text DEFAULT 'bm25',
    bm25_k1 double precision DEFAULT 0.9,
    bm25_b double precision DEFAULT 0.75,
    heading_weight double precision DEFAULT 1.0,
    max_postings integer DEFAULT 1000)
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
    candidate_query tsquery;
    all_lexemes text[];
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
    all_lexemes := q.lexemes || coalesce(q.negated, '{}');
    filtered := f.category IS NOT NULL OR f.metadata IS NOT NULL OR f.source_pattern IS NOT NULL;
    SELECT greatest(s.chunk_count, 1)::double precision INTO n_chunks FROM kb.corpus_stats s;
    -- the lexemes that generate candidates: rarest first, while their postings fit max_postings
    SELECT string_agg('''' || replace(replace(t.lexeme, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery
      INTO candidate_query
      FROM (SELECT l.lexeme, coalesce(ts.df, 0) AS df,
                   sum(coalesce(ts.df, 0)) OVER (ORDER BY coalesce(ts.df, 0), l.lexeme) AS running
              FROM unnest(q.lexemes) AS l(lexeme)
              LEFT JOIN kb.term_stats ts ON ts.lexeme = l.lexeme) t
     WHERE max_postings IS NULL OR t.running <= max_postings
        OR t.running = t.df;  -- the rarest lexeme always generates
    IF candidate_query IS NULL THEN
        candidate_query := q.any_query;
    END IF;
    IF use_bm25 THEN
        -- average chunk length in distinct lexemes: sum of df over all lexemes = sum of length(tsv)
        SELECT greatest(s.total_lexemes, 1)::double precision / n_chunks INTO avgdl
          FROM kb.corpus_stats s;
    END IF;

    RETURN QUERY
    WITH terms AS MATERIALIZED (
        SELECT l.lexeme,
               ln(1 + (n_chunks - coalesce(ts.df, 0) + 0.5) / (coalesce(ts.df, 0) + 0.5)) AS idf
          FROM unnest(q.lexemes) AS l(lexeme)
          LEFT JOIN kb.term_stats ts ON ts.lexeme = l.lexeme
    ),
    matched AS MATERIALIZED (
        -- one pass over each candidate's tsv: its length in distinct lexemes, and the positions
        -- of the query's lexemes only (marked B, then filtered), in the whole chunk and in the heading
        SELECT c.id,
               CASE WHEN use_bm25 THEN length(c.tsv) END AS dl,
               ts_filter(setweight(c.tsv, 'B', all_lexemes), '{b}') AS hits,
               CASE WHEN use_bm25 AND heading_weight <> 1
                    THEN ts_filter(setweight(ts_filter(c.tsv, '{a}'), 'B', q.lexemes), '{b}') END AS heading_hits,
               CASE WHEN NOT use_bm25 THEN ts_rank(c.tsv, q.any_query)::double precision END AS plain_rank,
               c.heading_path, c.content
          FROM kb.chunks c
         WHERE c.tsv @@ candidate_query
           AND (document_ids IS NULL OR c.document_id = ANY (document_ids))
           AND (NOT filtered OR EXISTS (
                   SELECT 1 FROM kb.documents d
                    WHERE d.id = c.document_id
                      AND (f.category IS NULL OR d.category = ANY (f.category))
                      AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                      AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)))
    ),
    scored AS (
        SELECT m.id,
               (q.strict_query IS NOT NULL AND m.hits @@ q.strict_query) AS strict,
               (q.identifiers IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM unnest(q.identifiers) AS i
                     WHERE NOT (m.heading_path ~* ('\m' || i || '\M')
                                OR m.content ~* ('\m' || i || '\M')))) AS exact,
               CASE WHEN use_bm25 THEN (
                   SELECT coalesce(sum(t.idf * x.tf * (bm25_k1 + 1)
                                       / (x.tf + bm25_k1 * (1 - bm25_b + bm25_b * m.dl / avgdl))), 0)
                     FROM (SELECT a.lexeme,
                                  coalesce(array_length(a.positions, 1), 1)
                                    + (heading_weight - 1) * coalesce((
                                          SELECT array_length(h.positions, 1)
                                            FROM unnest(m.heading_hits) AS h
                                           WHERE h.lexeme = a.lexeme), 0) AS tf
                             FROM unnest(m.hits) AS a) x
                     JOIN terms t ON t.lexeme = x.lexeme)
               ELSE m.plain_rank
               END AS score
          FROM matched m
         WHERE q.excluded IS NULL OR NOT m.hits @@ q.excluded
    ),
    ranked AS (
        SELECT s.id, s.score, s.strict,
               row_number() OVER (ORDER BY s.strict AND q.strict_first DESC, s.exact DESC, s.score DESC,
                                  s.id)::integer AS rank
          FROM scored s
         ORDER BY s.strict AND q.strict_first DESC, s.exact DESC, s.score DESC, s.id
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

COMMENT ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) IS
'Keyword retriever: OR-of-lexemes candidates, strict websearch_to_tsquery matches first, then BM25 (k1, b, IDF from kb.term_stats) or ts_rank; rank from 1, ties by chunk_id. Never errors on any query text.';

REVOKE ALL ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) TO kb_reader;
    END IF;
END
$$;
