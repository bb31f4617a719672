-- A prototype, not part of pgkb: BM25 scored from postings alone (bench/exact_from_postings.py).
--
-- kbx.postings_all holds every posting of every lexeme (not only the common words' ones, as
-- kb.term_postings does) with the term frequency and the chunk's length, so each posting's exact
-- BM25 part (k1 0.9, b 0.75, heading weight 1: the defaults) is computed without reading the
-- chunk. kbx.kw_fast reads the rarest words' lists whole while they fit half of max_read, and
-- the other lists to equal shares of the rest, in impact order; a chunk's known score is the sum
-- of the parts found; a list cut short bounds what its unread postings can add (idf x the last
-- impact read x max(1, avgdl / 80): kb.term_impacts uses a reference length of 80), so a chunk
-- that might still reach the top match_count is scored exactly from its tsvector, and
-- exact_all tells when no chunk outside the lists read could reach it either (then the result is
-- the exact BM25 top match_count of the whole corpus). Plain questions only: no filters, no
-- strict or identifier ordering.
CREATE SCHEMA IF NOT EXISTS kbx;

DROP TABLE IF EXISTS kbx.postings_all;
CREATE TABLE kbx.postings_all (
    lexeme text COLLATE "C" NOT NULL,
    impact real NOT NULL,
    chunk_id bigint NOT NULL,
    tf smallint NOT NULL,
    dl smallint NOT NULL);
INSERT INTO kbx.postings_all
SELECT t.lexeme, (f.tf * 1.9 / (f.tf + c.k))::real, c.id, f.tf::smallint, c.dl::smallint
  FROM (SELECT c.id, c.tsv, length(c.tsv) AS dl,
               (0.9 * (0.25 + 0.75 * length(c.tsv) / 80.0))::float8 AS k
          FROM kb.chunks c OFFSET 0) c,
       unnest(c.tsv) AS t,
       LATERAL (SELECT coalesce(array_length(t.positions, 1), 1)::float8 AS tf) f;
ALTER TABLE kbx.postings_all ADD PRIMARY KEY (lexeme, impact, chunk_id) INCLUDE (tf, dl);
-- then VACUUM ANALYZE kbx.postings_all (outside a transaction: the runner does it), so the
-- index-only scans need no heap visit

CREATE OR REPLACE FUNCTION kbx.kw_fast(query_text text, match_count int DEFAULT 20, max_read int DEFAULT 20000)
RETURNS TABLE (chunk_id bigint, score double precision, rescored boolean, n_read bigint, n_uncertain bigint, exact_all boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  q record; n double precision; avgdl double precision; ratio double precision;
BEGIN
  q := kb.search_query(query_text);
  IF q.any_query IS NULL THEN RETURN; END IF;
  SELECT greatest(s.chunk_count,1)::float8, greatest(s.total_lexemes,1)::float8/greatest(s.chunk_count,1)
    INTO n, avgdl FROM kb.corpus_stats s;
  ratio := greatest(1.0, avgdl / 80.0);
  RETURN QUERY
  WITH t0 AS (
     SELECT l.lexeme, coalesce(ts.df,0)::bigint AS df,
            ln(1 + (n - coalesce(ts.df,0) + 0.5)/(coalesce(ts.df,0)+0.5)) AS idf
       FROM unnest(q.lexemes) l(lexeme) LEFT JOIN kb.term_stats ts ON ts.lexeme = l.lexeme),
  t1 AS (
     SELECT t0.*, sum(t0.df) OVER (ORDER BY t0.df, t0.lexeme) AS running FROM t0),
  t AS MATERIALIZED (
     SELECT t1.lexeme, t1.df, t1.idf,
            CASE WHEN t1.running <= max_read / 2 THEN t1.df
                 ELSE greatest(match_count,
                        (max_read - coalesce((SELECT sum(x.df) FROM t1 x WHERE x.running <= max_read / 2), 0))
                        / greatest((SELECT count(*) FROM t1 x WHERE x.running > max_read / 2), 1)) END AS lim
       FROM t1 WHERE t1.df > 0),
  p AS MATERIALIZED (
     SELECT t.lexeme, t.idf, t.lim < t.df AS truncated, x.chunk_id, x.impact,
            t.idf * x.tf * 1.9::float8 / (x.tf + 0.9::float8 * (0.25::float8 + 0.75::float8 * x.dl / avgdl)) AS part
       FROM t CROSS JOIN LATERAL (
            SELECT pa.chunk_id, pa.impact, pa.tf, pa.dl FROM kbx.postings_all pa
             WHERE pa.lexeme = t.lexeme ORDER BY pa.impact DESC, pa.chunk_id DESC LIMIT t.lim) x),
  bounds AS MATERIALIZED (
     SELECT p.lexeme, max(p.idf) * min(p.impact) * ratio AS bound
       FROM p WHERE p.truncated GROUP BY p.lexeme),
  agg AS MATERIALIZED (
     SELECT p.chunk_id, sum(p.part) AS known, coalesce(sum(b.bound), 0) AS found_bound
       FROM p LEFT JOIN bounds b ON b.lexeme = p.lexeme GROUP BY p.chunk_id),
  withub AS MATERIALIZED (
     SELECT a.chunk_id, a.known, a.known + (SELECT coalesce(sum(b.bound), 0) FROM bounds b) - a.found_bound AS ub
       FROM agg a),
  theta AS (
     SELECT coalesce((SELECT w.known FROM withub w ORDER BY w.known DESC OFFSET match_count - 1 LIMIT 1), 0) AS v),
  uncertain AS MATERIALIZED (
     SELECT w.chunk_id FROM withub w, theta WHERE w.ub > w.known AND w.ub >= theta.v),
  rescored AS (
     SELECT c.id, sum(tt.idf * h.tf * 1.9::float8 / (h.tf + 0.9::float8 * (0.25::float8 + 0.75::float8 * length(c.tsv) / avgdl))) AS score
       FROM kb.chunks c
      CROSS JOIN LATERAL (SELECT (x).lexeme, coalesce(array_length((x).positions, 1), 1)::float8 AS tf
                            FROM unnest(ts_filter(setweight(c.tsv, 'B', q.lexemes), '{b}')) x) h
       JOIN t0 tt ON tt.lexeme = h.lexeme
      WHERE c.id IN (SELECT u.chunk_id FROM uncertain u)
      GROUP BY c.id),
  fin AS (
     SELECT w.chunk_id, coalesce(r.score, w.known) AS score, (r.id IS NOT NULL) AS rescored
       FROM withub w LEFT JOIN rescored r ON r.id = w.chunk_id, theta
      WHERE w.ub >= theta.v)
  SELECT f.chunk_id, f.score, f.rescored, (SELECT count(*) FROM p), (SELECT count(*) FROM uncertain),
         (SELECT (SELECT coalesce(sum(b.bound), 0) FROM bounds b) <= theta.v FROM theta)
    FROM fin f ORDER BY f.score DESC, f.chunk_id LIMIT match_count;
END $$;
