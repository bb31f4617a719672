-- kb.keyword_search(query_text text, match_count integer DEFAULT 20, filters jsonb DEFAULT '{}',
--                   document_ids uuid[] DEFAULT NULL, keyword_ranking text DEFAULT 'bm25',
--                   bm25_k1 double precision DEFAULT 0.9, bm25_b double precision DEFAULT 0.75,
--                   heading_weight double precision DEFAULT 1.0, max_postings integer DEFAULT 1000)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             rank integer, score double precision, strict_match boolean)
--
-- The keyword retriever: full-text search over kb.chunks.tsv (GIN index chunks_tsv_idx).
-- Backends: when kb.keyword_backend(the collections read) says 'pg_textsearch' (the session's
-- keyword_backend setting is auto or pg_textsearch, and the database has the extension and each
-- collection's bm25 index) and the ranking is BM25 with the default k1, b and heading_weight,
-- kb.keyword_search_pg_textsearch computes the result (same rules, BM25 from the compiled
-- index, max_postings unused); otherwise the SQL BM25 below.
-- Candidates are the chunks containing ANY positive lexeme of the question (OR semantics:
-- natural-language questions rarely contain all their words); chunks containing a -negated
-- word are dropped. A "quoted phrase" is a requirement: only chunks holding every quoted phrase
-- (websearch_to_tsquery's phrase, stemmed as the index is) are returned, and a quoted
-- identifier (a word with '_', or with letters and digits: "work_mem", "40P01") only where it
-- is written as a whole word (not maintenance_work_mem); the other words rank. Ranking, best
-- first:
--   1. when the text asks for exact matching (a "quoted phrase", or an identifier-like word such
--      as 40P01, pg_dump or maintenance_work_mem; see kb.search_query), the chunks matching the
--      strict websearch_to_tsquery query (every word, phrases as phrases) come first, so such
--      queries find their pages first; natural-language questions skip this step;
--   2. then chunks whose text holds every underscore identifier of the query as a whole word
--      (work_mem, not maintenance_work_mem, which the parser splits into the same lexemes);
--   3. within each group, by score:
--      keyword_ranking 'bm25' (default): Okapi BM25 over the statistics of the collections
--        searched (kb.collection_term_stats, kb.collection_stats):
--          score = sum over query lexemes t of idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
--          idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), N = chunk count, df = chunks containing t,
--          tf = occurrences of t in the content + heading_weight * occurrences in the heading path,
--          dl = distinct lexemes in the chunk (length(tsv): read without expanding the tsvector),
--          avgdl = the average of length(tsv);
--        N, df and avgdl count the chunks of the collections the call searches (filters'
--        collections, narrowed by the caller's grants and the session's pgkb.collections; every
--        collection when nothing narrows it), so a ranking, a score and which chunks are read
--        depend on nothing outside them; category, metadata, source and document_ids filters
--        do not change the statistics;
--      keyword_ranking 'ts_rank': PostgreSQL's ts_rank(tsv, OR-query) (no IDF, no length norm);
--   4. ties by chunk_id.
-- k1 < 0, b outside [0, 1], heading_weight < 0, or any of them NULL, NaN or infinite raise
-- (PK001, invalid argument).
-- Work bound, whatever the query: reading a candidate's tsv is the cost, so the candidates read
-- and scored are found without reading any chunk's text:
--   a. the rarest lexemes through the GIN index: while their postings together fit
--      max_postings (and the rarest one when it is held by at most 1,000 chunks), every chunk
--      holding them is a candidate; the next ones held by at most 1,000 chunks, while they fit
--      four times max_postings, only weigh in (b)'s choice: each of their chunks gets idf *
--      impact from the word's posting in kb.term_postings when the database's chunks holding
--      the word are more than 100 (an index read, no chunk row), else idf (a typical impact:
--      one occurrence in a chunk of average length) through the GIN index;
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
-- function' cost what a rare word costs. Scores are exact BM25 over each candidate, computed
-- from the candidate's tsv in one pass (a query lexeme's occurrences are read with ts_rank's
-- position count, no set-returning call per candidate); a chunk is missed only when it holds
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
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    q record;
    f record;
    n_chunks double precision;
    avgdl double precision;
    idfs double precision[];
    lexeme_queries tsquery[];
    weigh_queries tsquery[];
    weigh_query tsquery;
    lq tsquery[];
    whole_query tsquery;
    weigh text[];
    weigh_idfs double precision[];
    posted text[];
    posted_idfs double precision[];
    listed text[];
    listed_idfs double precision[];
    gin_postings bigint;
    budget integer;
    per_list integer;
    narrowed text;
    tf text;
    tf_columns text := '';
    score_sum text := '0';
    weigh_sum text := '0';
    cols text;
    statement text;
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
    -- the pg_textsearch backend (kb.keyword_backend: the session's keyword_backend setting and
    -- what the database has) serves BM25 with the default parameters; anything else is here
    IF keyword_ranking = 'bm25' AND bm25_k1 = 0.9 AND bm25_b = 0.75 AND heading_weight = 1
       AND kb.keyword_backend(f.collections) = 'pg_textsearch' THEN
        RETURN QUERY SELECT * FROM kb.keyword_search_pg_textsearch(query_text, match_count, filters,
                                                                   document_ids);
        RETURN;
    END IF;
    q := kb.search_query(query_text);
    IF q.any_query IS NULL THEN
        RETURN;
    END IF;
    -- in one statement: the statistics of the collections searched (all of them when nothing
    -- narrows the call), and each positive lexeme's df and idf and which way its chunks are
    -- found: the rarest through the GIN index, all their chunks candidates (whole); the next
    -- ones held by at most 1,000 chunks, while they fit four times max_postings, weigh in the
    -- choice of the others (their chunks through the GIN index when at most 100 chunks hold
    -- them: weigh; from kb.term_postings, which holds every posting of a word held by more than
    -- 100 chunks of the database, otherwise: posted); the common ones from their
    -- impact-ordered postings (listed)
    WITH st AS (
        SELECT greatest(coalesce(sum(s.chunk_count), 0), 1)::double precision AS n,
               greatest(coalesce(sum(s.total_lexemes), 0), 1)::double precision AS total
          FROM kb.collection_stats s
         WHERE f.collections IS NULL OR s.collection = ANY (f.collections)
    )
    SELECT min(st.n), min(st.total) / min(st.n),
           array_agg(t.idf ORDER BY t.ord),
           array_agg(t.query ORDER BY t.ord),
           string_agg(t.quoted, ' | ') FILTER (WHERE t.whole),
           array_agg(t.lexeme ORDER BY t.ord) FILTER (WHERE t.weighs AND t.df <= 100),
           array_agg(t.idf ORDER BY t.ord) FILTER (WHERE t.weighs AND t.df <= 100),
           array_agg(t.query ORDER BY t.ord) FILTER (WHERE t.weighs AND t.df <= 100),
           string_agg(t.quoted, ' | ') FILTER (WHERE t.weighs AND t.df <= 100),
           array_agg(t.lexeme ORDER BY t.ord) FILTER (WHERE t.weighs AND t.df > 100),
           array_agg(t.idf ORDER BY t.ord) FILTER (WHERE t.weighs AND t.df > 100),
           array_agg(t.lexeme ORDER BY t.ord) FILTER (WHERE t.df > 1000 AND NOT t.whole),
           array_agg(t.idf ORDER BY t.ord) FILTER (WHERE t.df > 1000 AND NOT t.whole),
           coalesce(sum(t.df) FILTER (WHERE t.whole), 0)
      INTO n_chunks, avgdl, idfs, lexeme_queries, whole_query, weigh, weigh_idfs, weigh_queries,
           weigh_query, posted, posted_idfs, listed, listed_idfs, gin_postings
      FROM st
      LEFT JOIN LATERAL (
           SELECT u.*, u.quoted::tsquery AS query,
                  NOT u.whole AND u.df > 0 AND u.df <= 1000 AND u.running <= 4 * max_postings AS weighs
             FROM (SELECT v.*,
                          v.df > 0 AND (v.running <= max_postings OR (v.running = v.df AND v.df <= 1000)) AS whole,
                          ln(1 + (st.n - v.df + 0.5) / (v.df + 0.5)) AS idf,
                          '''' || replace(replace(v.lexeme, '\', '\\'), '''', '''''') || '''' AS quoted
                     FROM (SELECT d.*, sum(d.df) OVER (ORDER BY d.df, d.lexeme) AS running
                             FROM (SELECT l.lexeme, l.ord, coalesce(sum(s.df), 0) AS df
                                     FROM unnest(q.lexemes) WITH ORDINALITY AS l(lexeme, ord)
                                     LEFT JOIN kb.collection_term_stats s
                                       ON s.lexeme = l.lexeme
                                      AND (f.collections IS NULL OR s.collection = ANY (f.collections))
                                    GROUP BY l.lexeme, l.ord) d) v) u) t ON true;
    budget := greatest(max_postings - gin_postings, match_count);
    -- each list read to four equal shares of the budget at most (in full when <= 4 lists)
    per_list := greatest(least(budget, 4 * budget / greatest(cardinality(listed), 1)), match_count);

    -- the common case, as one statement planned once per session (plan_cache_mode is
    -- force_generic_plan for this function): BM25 with heading_weight 1, no filter but the
    -- collections, no document_ids, at most 16 lexemes; the whole chunks and the chosen ones
    -- read once each, scored in one pass
    IF document_ids IS NULL AND f.category IS NULL AND f.metadata IS NULL
       AND f.source_pattern IS NULL AND keyword_ranking = 'bm25' AND heading_weight = 1
       AND cardinality(lexeme_queries) <= 16 AND coalesce(cardinality(weigh), 0) <= 8 THEN
        lq := lexeme_queries;
        RETURN QUERY
        -- the call's constants as one row, p, read below as columns: in a generic plan each
        -- variable and array element would otherwise be evaluated once per row it is used in
        WITH p AS MATERIALIZED (
            SELECT lq[1] AS q1, lq[2] AS q2, lq[3] AS q3, lq[4] AS q4,
                   lq[5] AS q5, lq[6] AS q6, lq[7] AS q7, lq[8] AS q8,
                   lq[9] AS q9, lq[10] AS q10, lq[11] AS q11, lq[12] AS q12,
                   lq[13] AS q13, lq[14] AS q14, lq[15] AS q15, lq[16] AS q16,
                   idfs[1] AS i1, idfs[2] AS i2, idfs[3] AS i3, idfs[4] AS i4,
                   idfs[5] AS i5, idfs[6] AS i6, idfs[7] AS i7, idfs[8] AS i8,
                   idfs[9] AS i9, idfs[10] AS i10, idfs[11] AS i11, idfs[12] AS i12,
                   idfs[13] AS i13, idfs[14] AS i14, idfs[15] AS i15, idfs[16] AS i16,
                   weigh_queries[1] AS wq1, weigh_queries[2] AS wq2, weigh_queries[3] AS wq3, weigh_queries[4] AS wq4,
                   weigh_queries[5] AS wq5, weigh_queries[6] AS wq6, weigh_queries[7] AS wq7, weigh_queries[8] AS wq8,
                   weigh_idfs[1] AS wi1, weigh_idfs[2] AS wi2, weigh_idfs[3] AS wi3, weigh_idfs[4] AS wi4,
                   weigh_idfs[5] AS wi5, weigh_idfs[6] AS wi6, weigh_idfs[7] AS wi7, weigh_idfs[8] AS wi8,
                   bm25_k1 AS k1, bm25_k1 + 1 AS k1p, bm25_b AS b, avgdl AS avgdl,
                   q.strict_first AS strict_first, q.strict_query AS strict_query,
                   q.identifiers AS identifiers, q.excluded AS excluded, q.required AS required,
                   q.required_words AS required_words
        ),
        whole AS MATERIALIZED (
            SELECT c.id, c.tsv,
                   CASE WHEN q.identifiers IS NOT NULL OR q.required_words IS NOT NULL
                        THEN c.heading_path || ' ' || c.content END AS text
              FROM kb.chunks c
             WHERE c.tsv @@ whole_query
               AND (f.collections IS NULL OR c.collection = ANY (f.collections))
        ),
        weighed (id, weight) AS (
            SELECT c.id,
                   CASE WHEN c.tsv @@ p.wq1 THEN p.wi1 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq2 THEN p.wi2 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq3 THEN p.wi3 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq4 THEN p.wi4 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq5 THEN p.wi5 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq6 THEN p.wi6 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq7 THEN p.wi7 ELSE 0 END
                   + CASE WHEN c.tsv @@ p.wq8 THEN p.wi8 ELSE 0 END
              FROM p, kb.chunks c
             WHERE c.tsv @@ weigh_query
               AND (f.collections IS NULL OR c.collection = ANY (f.collections))
            UNION ALL
            SELECT tp.chunk_id, l.idf * tp.impact
              FROM unnest(posted, posted_idfs) AS l(lexeme, idf)
              JOIN kb.term_postings tp ON tp.lexeme = l.lexeme
             WHERE f.collections IS NULL OR EXISTS (
                       SELECT 1 FROM kb.chunks c
                        WHERE c.id = tp.chunk_id AND c.collection = ANY (f.collections))
            UNION ALL
            SELECT tp.chunk_id, tp.impact * l.idf
              FROM unnest(listed, listed_idfs) AS l(lexeme, idf)
             CROSS JOIN LATERAL (
                  SELECT tp.chunk_id, tp.impact FROM kb.term_postings tp
                   WHERE tp.lexeme = l.lexeme
                     AND (f.collections IS NULL OR EXISTS (
                             SELECT 1 FROM kb.chunks c
                              WHERE c.id = tp.chunk_id AND c.collection = ANY (f.collections)))
                   ORDER BY tp.impact DESC, tp.chunk_id DESC
                   LIMIT per_list) tp
        ),
        chosen AS (
            SELECT w.id FROM weighed w
             WHERE NOT EXISTS (SELECT 1 FROM whole h WHERE h.id = w.id)
             GROUP BY w.id
             ORDER BY sum(w.weight) DESC, w.id DESC
             LIMIT greatest(gin_postings + budget - (SELECT count(*) FROM whole), 0)
        ),
        cands AS (
            SELECT h.id, h.tsv, h.text FROM whole h
            UNION ALL
            SELECT c.id, c.tsv,
                   CASE WHEN q.identifiers IS NOT NULL OR q.required_words IS NOT NULL
                        THEN c.heading_path || ' ' || c.content END
              FROM kb.chunks c
             WHERE c.id IN (SELECT ch.id FROM chosen ch)
        ),
        scored AS (
            SELECT x.id,
                   0
                   + coalesce(x.i1 * x.tf1 * x.k1p / nullif(x.tf1 + x.k, 0), 0)
                   + coalesce(x.i2 * x.tf2 * x.k1p / nullif(x.tf2 + x.k, 0), 0)
                   + coalesce(x.i3 * x.tf3 * x.k1p / nullif(x.tf3 + x.k, 0), 0)
                   + coalesce(x.i4 * x.tf4 * x.k1p / nullif(x.tf4 + x.k, 0), 0)
                   + coalesce(x.i5 * x.tf5 * x.k1p / nullif(x.tf5 + x.k, 0), 0)
                   + coalesce(x.i6 * x.tf6 * x.k1p / nullif(x.tf6 + x.k, 0), 0)
                   + coalesce(x.i7 * x.tf7 * x.k1p / nullif(x.tf7 + x.k, 0), 0)
                   + coalesce(x.i8 * x.tf8 * x.k1p / nullif(x.tf8 + x.k, 0), 0)
                   + coalesce(x.i9 * x.tf9 * x.k1p / nullif(x.tf9 + x.k, 0), 0)
                   + coalesce(x.i10 * x.tf10 * x.k1p / nullif(x.tf10 + x.k, 0), 0)
                   + coalesce(x.i11 * x.tf11 * x.k1p / nullif(x.tf11 + x.k, 0), 0)
                   + coalesce(x.i12 * x.tf12 * x.k1p / nullif(x.tf12 + x.k, 0), 0)
                   + coalesce(x.i13 * x.tf13 * x.k1p / nullif(x.tf13 + x.k, 0), 0)
                   + coalesce(x.i14 * x.tf14 * x.k1p / nullif(x.tf14 + x.k, 0), 0)
                   + coalesce(x.i15 * x.tf15 * x.k1p / nullif(x.tf15 + x.k, 0), 0)
                   + coalesce(x.i16 * x.tf16 * x.k1p / nullif(x.tf16 + x.k, 0), 0) AS score,
                   x.strict, x.exact
              FROM (SELECT y.id,
                           p.i1, p.i2, p.i3, p.i4, p.i5, p.i6, p.i7, p.i8,
                           p.i9, p.i10, p.i11, p.i12, p.i13, p.i14, p.i15, p.i16, p.k1p,
                           p.k1 * (1 - p.b + p.b * length(y.tsv) / p.avgdl) AS k,
                           CASE WHEN y.tsv @@ p.q1
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q1, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf1,
                           CASE WHEN y.tsv @@ p.q2
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q2, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf2,
                           CASE WHEN y.tsv @@ p.q3
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q3, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf3,
                           CASE WHEN y.tsv @@ p.q4
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q4, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf4,
                           CASE WHEN y.tsv @@ p.q5
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q5, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf5,
                           CASE WHEN y.tsv @@ p.q6
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q6, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf6,
                           CASE WHEN y.tsv @@ p.q7
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q7, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf7,
                           CASE WHEN y.tsv @@ p.q8
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q8, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf8,
                           CASE WHEN y.tsv @@ p.q9
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q9, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf9,
                           CASE WHEN y.tsv @@ p.q10
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q10, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf10,
                           CASE WHEN y.tsv @@ p.q11
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q11, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf11,
                           CASE WHEN y.tsv @@ p.q12
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q12, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf12,
                           CASE WHEN y.tsv @@ p.q13
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q13, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf13,
                           CASE WHEN y.tsv @@ p.q14
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q14, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf14,
                           CASE WHEN y.tsv @@ p.q15
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q15, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf15,
                           CASE WHEN y.tsv @@ p.q16
                                THEN round(1 / (1.6449340668482264 - ts_rank('{1,1,1,1}', y.tsv, p.q16, 0)::float8
                                                * 1.6449340668482264) - 0.5)
                                ELSE 0 END AS tf16,
                           (p.strict_first AND y.tsv @@ p.strict_query) AS strict,
                           (p.identifiers IS NOT NULL AND NOT EXISTS (
                                SELECT 1 FROM unnest(p.identifiers) AS i
                                 WHERE NOT y.text ~* ('\m' || i || '\M'))) AS exact
                      FROM p, cands y
                     WHERE (p.excluded IS NULL OR NOT y.tsv @@ p.excluded)
                       AND (p.required IS NULL OR y.tsv @@ p.required)
                       AND (p.required_words IS NULL OR NOT EXISTS (
                                SELECT 1 FROM unnest(p.required_words) AS i
                                 WHERE NOT y.text ~* ('\m' || i || '\M')))
                    OFFSET 0) x
        )
        SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path, c.content,
               r.rank, r.score, coalesce(c.tsv @@ q.strict_query, false)
          FROM (SELECT t.id, t.score,
                       row_number() OVER (ORDER BY t.strict DESC, t.exact DESC, t.score DESC, t.id)::integer AS rank
                  -- the best match_count first (a bounded sort), then numbered
                  FROM (SELECT s.id, s.score, s.strict, s.exact FROM scored s
                         ORDER BY s.strict DESC, s.exact DESC, s.score DESC, s.id
                         LIMIT match_count) t) r
          JOIN kb.chunks c ON c.id = r.id
          JOIN kb.documents d ON d.id = c.document_id
         ORDER BY r.rank;
        RETURN;
    END IF;

    -- the filters on a chunk c, as text with parameters: the collections on the chunk itself,
    -- the others on its document
    narrowed := '';
    IF f.collections IS NOT NULL THEN
        narrowed := narrowed || ' AND c.collection = ANY ($10)';
    END IF;
    IF f.category IS NOT NULL OR f.metadata IS NOT NULL OR f.source_pattern IS NOT NULL THEN
        narrowed := narrowed || ' AND EXISTS (SELECT 1 FROM kb.documents d WHERE d.id = c.document_id'
            || CASE WHEN f.category IS NOT NULL THEN ' AND d.category = ANY ($11)' ELSE '' END
            || CASE WHEN f.metadata IS NOT NULL THEN ' AND d.metadata @> $12' ELSE '' END
            || CASE WHEN f.source_pattern IS NOT NULL THEN ' AND d.source_uri LIKE $13' ELSE '' END
            || ')';
    END IF;
    IF document_ids IS NOT NULL THEN
        narrowed := narrowed || ' AND c.document_id = ANY ($14)';
    END IF;

    -- a candidate's score, from its tsv alone: each query lexeme's occurrences are its position
    -- count, read from ts_rank with every weight 1 (sum over positions j of 1/j^2, divided by
    -- pi^2/6: inverted exactly for 1 to 256 positions, the most a tsvector keeps), and with
    -- heading_weight <> 1 the heading's occurrences the same way (weight A only, the heading's
    -- positions come first)
    IF keyword_ranking = 'bm25' THEN
        FOR i IN 1 .. cardinality(lexeme_queries) LOOP
            tf := format('round(1 / (1.6449340668482264 - ts_rank(''{1,1,1,1}'', c.tsv, $1[%s], 0)::float8'
                         || ' * 1.6449340668482264) - 0.5)', i);
            IF heading_weight <> 1 THEN
                tf := tf || format(' + ($4 - 1) * round(1 / (1.6449340668482264 - ts_rank(''{0,0,0,1}'', c.tsv, $1[%s], 0)::float8'
                                   || ' * 1.6449340668482264) - 0.5)', i);
            END IF;
            tf_columns := tf_columns || format(', %s AS tf%s', tf, i);
            score_sum := score_sum || format(' + coalesce($2[%s] * x.tf%s * ($5 + 1) / nullif(x.tf%s + x.k, 0), 0)',
                                             i, i, i);
        END LOOP;
    END IF;
    -- what is computed for every candidate c: its score, whether it matches the strict query,
    -- holds the identifiers as words, holds a negated word, holds every quoted part
    cols := format(
        'SELECT x.id, %s AS score, x.strict, x.exact, x.dropped'
        ' FROM (SELECT c.id, $5 * (1 - $6 + $6 * length(c.tsv) / $7) AS k%s,'
        '              %s AS strict, %s AS exact, %s AS dropped %s'
        '         FROM kb.chunks c WHERE %%s %s OFFSET 0) x',
        CASE WHEN keyword_ranking = 'bm25' THEN score_sum ELSE 'x.plain' END,
        tf_columns,
        CASE WHEN q.strict_query IS NULL THEN 'false' ELSE 'c.tsv @@ $15' END,
        CASE WHEN q.identifiers IS NULL THEN 'false'
             ELSE 'NOT EXISTS (SELECT 1 FROM unnest($16) AS i WHERE NOT (c.heading_path ~* (''\m'' || i || ''\M'') OR c.content ~* (''\m'' || i || ''\M'')))' END,
        CASE WHEN q.excluded IS NULL AND q.required IS NULL AND q.required_words IS NULL THEN 'false'
             ELSE concat_ws(' OR ',
                 CASE WHEN q.excluded IS NOT NULL THEN 'c.tsv @@ $17' END,
                 CASE WHEN q.required IS NOT NULL THEN 'NOT c.tsv @@ $18' END,
                 CASE WHEN q.required_words IS NOT NULL THEN 'EXISTS (SELECT 1 FROM unnest($19) AS i WHERE NOT (c.heading_path ~* (''\m'' || i || ''\M'') OR c.content ~* (''\m'' || i || ''\M'')))' END) END,
        CASE WHEN keyword_ranking = 'bm25' THEN '' ELSE ', ts_rank(c.tsv, $20)::float8 AS plain' END,
        narrowed);

    IF document_ids IS NOT NULL THEN
        -- the given documents' chunks holding any query lexeme: bounded by their size
        statement := format('WITH scored AS (%s) ', format(cols, 'c.tsv @@ $20'));
    ELSE
        -- whole: scored as they are found; chosen: the other chunks the words weigh most for
        -- (the weigh lexemes' chunks, from kb.term_postings with idf * impact or through the GIN
        -- index with idf; the
        -- common words' best postings, idf * impact), up to gin_postings + budget in all
        FOR i IN 1 .. coalesce(cardinality(weigh), 0) LOOP
            weigh_sum := weigh_sum || format(' + CASE WHEN c.tsv @@ $21[%s] THEN $22[%s] ELSE 0 END', i, i);
        END LOOP;
        statement := format(
            'WITH whole AS MATERIALIZED (%s),'
            ' weighed (id, weight) AS (%s),'
            ' chosen AS ('
            '    SELECT w.id FROM weighed w'
            '     WHERE NOT EXISTS (SELECT 1 FROM whole h WHERE h.id = w.id)'
            '     GROUP BY w.id ORDER BY sum(w.weight) DESC, w.id DESC'
            '     LIMIT greatest($27 - (SELECT count(*) FROM whole), 0)),'
            ' scored AS (SELECT * FROM whole UNION ALL %s) ',
            format(cols, CASE WHEN whole_query IS NULL THEN 'false' ELSE 'c.tsv @@ $28' END),
            concat_ws(' UNION ALL ',
                CASE WHEN weigh IS NOT NULL THEN
                    format('SELECT c.id, %s FROM kb.chunks c WHERE c.tsv @@ $23 %s', weigh_sum, narrowed)
                END,
                CASE WHEN posted IS NOT NULL THEN
                    'SELECT tp.chunk_id, l.idf * tp.impact'
                    '  FROM unnest($30, $31) AS l(lexeme, idf)'
                    '  JOIN kb.term_postings tp ON tp.lexeme = l.lexeme'
                    || CASE WHEN narrowed = '' THEN ''
                            ELSE ' WHERE EXISTS (SELECT 1 FROM kb.chunks c WHERE c.id = tp.chunk_id'
                                 || narrowed || ')' END
                END,
                CASE WHEN listed IS NOT NULL THEN
                    'SELECT tp.chunk_id, tp.impact * l.idf'
                    '  FROM unnest($24, $25) AS l(lexeme, idf)'
                    ' CROSS JOIN LATERAL ('
                    '      SELECT tp.chunk_id, tp.impact FROM kb.term_postings tp'
                    '       WHERE tp.lexeme = l.lexeme'
                    || CASE WHEN narrowed = '' THEN ''
                            ELSE ' AND EXISTS (SELECT 1 FROM kb.chunks c WHERE c.id = tp.chunk_id'
                                 || narrowed || ')' END
                    || '   ORDER BY tp.impact DESC, tp.chunk_id DESC LIMIT $26) tp'
                END,
                'SELECT NULL::bigint, NULL::double precision WHERE false'),
            format(cols, 'c.id IN (SELECT chosen.id FROM chosen)'));
    END IF;
    statement := statement ||
        'SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path, c.content,'
        '       r.rank, r.score, r.strict'
        '  FROM (SELECT s.id, s.score, s.strict,'
        '               row_number() OVER (ORDER BY s.strict AND $29 DESC, s.exact DESC, s.score DESC, s.id)::integer AS rank'
        '          FROM scored s WHERE NOT s.dropped'
        '         ORDER BY s.strict AND $29 DESC, s.exact DESC, s.score DESC, s.id'
        '         LIMIT $3) r'
        '  JOIN kb.chunks c ON c.id = r.id'
        '  JOIN kb.documents d ON d.id = c.document_id'
        ' ORDER BY r.rank';
    RETURN QUERY EXECUTE statement
        USING lexeme_queries, idfs, match_count, heading_weight, bm25_k1, bm25_b, avgdl,
              NULL::integer, NULL::integer, f.collections, f.category, f.metadata,
              f.source_pattern, document_ids, q.strict_query, q.identifiers, q.excluded,
              q.required, q.required_words, q.any_query,
              weigh_queries, weigh_idfs,
              weigh_query,
              listed, listed_idfs, per_list, gin_postings + budget, whole_query::tsquery,
              q.strict_first, posted, posted_idfs;
END;
$$;

COMMENT ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) IS
'Keyword retriever: OR-of-lexemes candidates, quoted phrases and identifiers required, strict websearch_to_tsquery matches first, then BM25 (k1, b, IDF and lengths of the collections searched) or ts_rank; rank from 1, ties by chunk_id. Never errors on any query text. Maxima: match_count 1000, max_postings 100000 (NULL means 100000).';

REVOKE ALL ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.keyword_search(text, integer, jsonb, uuid[], text, double precision, double precision, double precision, integer) TO kb_reader;
    END IF;
END
$$;
