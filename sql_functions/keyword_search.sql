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
-- k1 < 0, b outside [0, 1], heading_weight < 0, or any of them NULL, NaN or infinite raise
-- (PK001, invalid argument).
-- Work bound, whatever the query: reading a candidate's tsv is the cost, so the candidates read
-- and scored are found without reading any chunk's text:
--   a. the rarest lexemes through the GIN index: while their postings together fit
--      max_postings (and the rarest one when it is held by at most 1,000 chunks), every chunk
--      holding them is a candidate; the next ones held by at most 1,000 chunks, while they fit
--      four times max_postings, only weigh in (b)'s choice, each of their chunks getting idf
--      (a typical impact: one occurrence in a chunk of average length);
--   b. what is left of max_postings after (a) (at least match_count) goes to the chunks the
--      query's words weigh most for: for the other lexemes held by more than 1,000 chunks
--      (common words), their best postings from kb.term_postings, where each common word's list is in
--      impact order (kb.term_impacts: the BM25 term-frequency part, so it starts with the chunks
--      the word scores highest in), each list read to four equal shares of that budget at most
--      (to the whole of it when there are at most four common words), so the postings read stay
--      within four times the budget however many common words the query holds; each posting
--      gives its chunk idf * impact, and a chunk's weight is the sum over the words it was found
--      for, so a chunk holding several of the words, or rarer ones, comes before one holding a
--      single very common word;
--   with category, metadata, source or collection filters, only chunks of the documents that
--   pass them; with document_ids, the chunks of those documents holding any query lexeme
--   instead (work bounded by those documents' size).
-- The remaining lexemes (too many rare postings for the bound) find nothing but count in every
-- candidate's score. So the work is bounded however common the words: 'chapter' or 'data table
-- function' cost what a rare word costs. Scores are exact BM25 over each candidate (every
-- candidate's matching lexemes scored in one flat join); a chunk is missed only when it holds
-- no lexeme of (a)'s first part and its weight from the postings read does not place it among
-- the heaviest.
-- max_postings is clamped to 100,000 (NULL or larger values act as 100,000: on a corpus whose
-- lexemes are each held by fewer chunks, every posting is read, the exact BM25 ranking),
-- match_count to 1,000: a caller cannot ask for unbounded work.
-- strict_match tells whether the chunk matches the strict query (whatever the ranking did with
-- it). rank counts from 1. filters: see kb.search_filters (category, metadata, source, collections); document_ids
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
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
    f record;
    n_chunks double precision;
    avgdl double precision;
    use_bm25 boolean;
    filtered boolean;
    candidate_query tsquery;
    listed text[];
    listed_ids bigint[];
    per_list integer;
    budget integer;
    gin_lexemes text[];
    whole_lexemes text[];
    gin_postings bigint;
    all_lexemes text[];
BEGIN
    IF keyword_ranking IS NULL OR keyword_ranking NOT IN ('bm25', 'ts_rank') THEN
        RAISE EXCEPTION 'unknown keyword_ranking %; valid values are: bm25, ts_rank',
            coalesce(quote_literal(keyword_ranking), 'NULL')
            USING ERRCODE = 'PK001';
    END IF;
    -- finite: NaN sorts above every number in PostgreSQL, so "NaN < 0" is false; NULL fails too
    IF NOT (bm25_k1 >= 0 AND bm25_k1 < 'Infinity'::double precision
            AND bm25_b >= 0 AND bm25_b <= 1
            AND heading_weight >= 0 AND heading_weight < 'Infinity'::double precision) IS TRUE THEN
        RAISE EXCEPTION 'invalid BM25 parameters k1=%, b=%, heading_weight=% (each must be finite)', bm25_k1, bm25_b, heading_weight
            USING ERRCODE = 'PK001',
                  HINT = 'k1 >= 0, 0 <= b <= 1, heading_weight >= 0, all finite';
    END IF;
    f := kb.search_filters(filters);
    IF match_count IS NULL OR match_count < 1 THEN
        RETURN;
    END IF;
    -- documented maxima (see COMMENT ON)
    match_count := least(match_count, 1000);
    max_postings := least(coalesce(max_postings, 100000), 100000);
    q := kb.search_query(query_text);
    IF q.any_query IS NULL THEN
        RETURN;
    END IF;
    use_bm25 := keyword_ranking = 'bm25';
    all_lexemes := q.lexemes || coalesce(q.negated, '{}');
    filtered := f.category IS NOT NULL OR f.metadata IS NOT NULL OR f.source_pattern IS NOT NULL
                OR f.collections IS NOT NULL;
    SELECT greatest(s.chunk_count, 1)::double precision INTO n_chunks FROM kb.corpus_stats s;
    -- the lexemes read through the GIN index (a), rarest first: those whose postings fit
    -- max_postings (and the rarest one, when it is held by at most 1,000 chunks) bring all their
    -- chunks; the next ones held by at most 1,000 chunks, while they fit four times max_postings,
    -- weigh in; the common ones are read from their impact-ordered lists (b)
    SELECT array_agg(t.lexeme) FILTER (WHERE t.whole OR (t.df > 0 AND t.df <= 1000
                                                          AND t.running <= 4 * max_postings)),
           array_agg(t.lexeme) FILTER (WHERE t.whole),
           coalesce(sum(t.df) FILTER (WHERE t.whole), 0),
           array_agg(t.lexeme) FILTER (WHERE t.df > 1000 AND NOT t.whole)
      INTO gin_lexemes, whole_lexemes, gin_postings, listed
      FROM (SELECT u.*,
                   u.df > 0 AND (u.running <= max_postings OR (u.running = u.df AND u.df <= 1000)) AS whole
              FROM (SELECT l.lexeme, coalesce(ts.df, 0) AS df,
                           sum(coalesce(ts.df, 0)) OVER (ORDER BY coalesce(ts.df, 0), l.lexeme) AS running
                      FROM unnest(q.lexemes) AS l(lexeme)
                      LEFT JOIN kb.term_stats ts ON ts.lexeme = l.lexeme) u) t;
    budget := greatest(max_postings - gin_postings, match_count);
    -- each list read to four equal shares of the budget at most (in full when <= 4 lists)
    per_list := greatest(least(budget, 4 * budget / greatest(cardinality(listed), 1)), match_count);
    IF document_ids IS NULL THEN
        -- the chunks the query's words weigh most for in BM25, without reading any chunk's
        -- text: the sum over the words of idf * impact (a common word's postings carry their
        -- impact) or idf (a rarer word: its typical impact, one occurrence in a chunk of
        -- average length)
        SELECT array_agg(p.id) INTO listed_ids
          FROM (SELECT w.id
                  FROM (SELECT tp.chunk_id AS id,
                               tp.impact * ln(1 + (n_chunks - ts.df + 0.5) / (ts.df + 0.5)) AS weight,
                               false AS whole
                          FROM unnest(listed) AS l(lexeme)
                          JOIN kb.term_stats ts ON ts.lexeme = l.lexeme
                         CROSS JOIN LATERAL (
                              SELECT tp.chunk_id, tp.impact
                                FROM kb.term_postings tp
                               WHERE tp.lexeme = l.lexeme
                                 AND (NOT filtered OR EXISTS (
                                         SELECT 1 FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id
                                          WHERE c.id = tp.chunk_id
                                            AND (f.category IS NULL OR d.category = ANY (f.category))
                                            AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                                            AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
                                            AND (f.collections IS NULL OR d.collection = ANY (f.collections))))
                               ORDER BY tp.impact DESC, tp.chunk_id DESC
                               LIMIT per_list) tp
                        UNION ALL
                        SELECT c.id, ln(1 + (n_chunks - ts.df + 0.5) / (ts.df + 0.5)),
                               g.lexeme = ANY (whole_lexemes)
                          FROM unnest(gin_lexemes) AS g(lexeme)
                          JOIN kb.term_stats ts ON ts.lexeme = g.lexeme
                         CROSS JOIN LATERAL (
                              SELECT c.id
                                FROM kb.chunks c
                               WHERE c.tsv @@ ('''' || replace(replace(g.lexeme, '\', '\\'), '''', '''''') || '''')::tsquery
                                 AND (NOT filtered OR EXISTS (
                                         SELECT 1 FROM kb.documents d
                                          WHERE d.id = c.document_id
                                            AND (f.category IS NULL OR d.category = ANY (f.category))
                                            AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                                            AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
                                            AND (f.collections IS NULL OR d.collection = ANY (f.collections))))) c) w
                 GROUP BY w.id
                 ORDER BY bool_or(w.whole) DESC, sum(w.weight) DESC, w.id DESC
                 LIMIT gin_postings + budget) p;
    ELSE
        candidate_query := q.any_query;  -- the given documents' chunks: bounded by their size
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
        -- of the query's lexemes only (marked B, then filtered), in the whole chunk and in the
        -- heading; the candidates by id (or, with document_ids, through the GIN index)
        SELECT c.id,
               CASE WHEN use_bm25 THEN length(c.tsv) END AS dl,
               ts_filter(setweight(c.tsv, 'B', all_lexemes), '{b}') AS hits,
               CASE WHEN use_bm25 AND heading_weight <> 1
                    THEN ts_filter(setweight(ts_filter(c.tsv, '{a}'), 'B', q.lexemes), '{b}') END AS heading_hits,
               CASE WHEN NOT use_bm25 THEN ts_rank(c.tsv, q.any_query)::double precision END AS plain_rank,
               CASE WHEN q.identifiers IS NOT NULL THEN c.heading_path END AS heading_path,
               CASE WHEN q.identifiers IS NOT NULL THEN c.content END AS content
          FROM kb.chunks c
         WHERE (c.tsv @@ candidate_query OR c.id = ANY (listed_ids))
           AND (document_ids IS NULL OR c.document_id = ANY (document_ids))
           AND (NOT filtered OR EXISTS (
                   SELECT 1 FROM kb.documents d
                    WHERE d.id = c.document_id
                      AND (f.category IS NULL OR d.category = ANY (f.category))
                      AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                      AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
                      AND (f.collections IS NULL OR d.collection = ANY (f.collections))))
    ),
    kept AS (
        SELECT m.* FROM matched m
         WHERE q.excluded IS NULL OR NOT m.hits @@ q.excluded
    ),
    -- every candidate's hits as rows (one set-returning call per candidate, no subquery per
    -- candidate): the occurrences of each query lexeme in the chunk, and in its heading path
    hit_rows AS (
        SELECT h.id, h.dl, (h.hit).lexeme,
               coalesce(array_length((h.hit).positions, 1), 1)::double precision AS occurrences
          FROM (SELECT k.id, k.dl, unnest(k.hits) AS hit FROM kept k WHERE use_bm25) h
    ),
    heading_rows AS (
        SELECT h.id, (h.hit).lexeme,
               coalesce(array_length((h.hit).positions, 1), 0)::double precision AS occurrences
          FROM (SELECT k.id, unnest(k.heading_hits) AS hit FROM kept k
                 WHERE k.heading_hits IS NOT NULL) h
    ),
    bm25 AS (
        SELECT x.id,
               sum(t.idf * x.tf * (bm25_k1 + 1)
                   / (x.tf + bm25_k1 * (1 - bm25_b + bm25_b * x.dl / avgdl))) AS score
          FROM (SELECT r.id, r.dl, r.lexeme,
                       r.occurrences + (heading_weight - 1) * coalesce(hr.occurrences, 0) AS tf
                  FROM hit_rows r
                  LEFT JOIN heading_rows hr ON hr.id = r.id AND hr.lexeme = r.lexeme) x
          JOIN terms t ON t.lexeme = x.lexeme
         GROUP BY x.id
    ),
    scored AS (
        SELECT m.id,
               (q.strict_query IS NOT NULL AND m.hits @@ q.strict_query) AS strict,
               (q.identifiers IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM unnest(q.identifiers) AS i
                     WHERE NOT (m.heading_path ~* ('\m' || i || '\M')
                                OR m.content ~* ('\m' || i || '\M')))) AS exact,
               CASE WHEN use_bm25 THEN coalesce(b.score, 0) ELSE m.plain_rank END AS score
          FROM kept m
          LEFT JOIN bm25 b ON b.id = m.id
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
'Keyword retriever: OR-of-lexemes candidates, strict websearch_to_tsquery matches first, then BM25 (k1, b, IDF from kb.term_stats) or ts_rank; rank from 1, ties by chunk_id. Never errors on any query text. Maxima: match_count 1000, max_postings 100000 (NULL means 100000).';

REVOKE ALL ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) TO kb_reader;
    END IF;
END
$$;
