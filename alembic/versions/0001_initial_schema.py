"""The kb schema: documents, chunks, per-model embeddings, keyword statistics, relations.

Revision ID: 0001
Revises:
"""

from alembic import op

from loader.migration_ops import apply_functions, run_sql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA_UP = r"""
CREATE EXTENSION IF NOT EXISTS vector;

-- The read-only role for services and analysts: it may search, never write.
-- Created before the functions, whose files grant EXECUTE on the search functions to it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        CREATE ROLE kb_reader NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role kb_reader (no CREATEROLE privilege); create it and re-grant';
END
$$;

-- One row per vector space: vectors of different models (or dims) are never compared.
CREATE TABLE kb.embedding_models (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CHECK (btrim(name) <> ''),
    dims        integer NOT NULL CHECK (dims BETWEEN 1 AND 16000),
    provider    text NOT NULL,
    is_active   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, dims)
);
CREATE UNIQUE INDEX embedding_models_one_active ON kb.embedding_models (is_active) WHERE is_active;
COMMENT ON TABLE kb.embedding_models IS 'Embedding models (name + dims = one vector space); exactly one is active.';

CREATE TABLE kb.documents (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    source_uri   text NOT NULL UNIQUE CHECK (btrim(source_uri) <> ''),
    title        text NOT NULL,
    content_sha  text NOT NULL,
    category     text,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX documents_category_idx ON kb.documents (category);
CREATE INDEX documents_metadata_idx ON kb.documents USING gin (metadata jsonb_path_ops);
CREATE INDEX documents_updated_at_idx ON kb.documents (updated_at);
COMMENT ON TABLE kb.documents IS 'One row per source; source_uri is its identity for re-ingestion, content_sha skips unchanged sources.';

CREATE TABLE kb.chunks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id   uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    chunk_index   integer NOT NULL CHECK (chunk_index >= 0),
    heading_path  text NOT NULL DEFAULT '',
    content       text NOT NULL,
    content_sha   text NOT NULL,
    token_count   integer NOT NULL CHECK (token_count >= 0),
    tsv           tsvector GENERATED ALWAYS AS (
                      setweight(to_tsvector('english'::regconfig, heading_path), 'A')
                      || setweight(to_tsvector('english'::regconfig, content), 'D')) STORED,
    UNIQUE (document_id, chunk_index)
);
CREATE INDEX chunks_tsv_idx ON kb.chunks USING gin (tsv);
CREATE INDEX chunks_content_sha_idx ON kb.chunks (content_sha);
COMMENT ON TABLE kb.chunks IS 'Passages of a document in order (chunk_index); tsv indexes heading_path (weight A) and content (weight D).';
COMMENT ON COLUMN kb.chunks.content_sha IS 'sha256 of the text given to the embedding model; equal text reuses its embedding.';
COMMENT ON COLUMN kb.chunks.token_count IS 'Length of the chunk in tokens of the embedding model''s tokenizer.';

-- Untyped vector column + model_id + one partial HNSW expression index per model
-- (created by kb.register_model): pgvector's pattern for several vector spaces in one table.
CREATE TABLE kb.embeddings (
    chunk_id    bigint NOT NULL REFERENCES kb.chunks (id) ON DELETE CASCADE,
    model_id    integer NOT NULL REFERENCES kb.embedding_models (id) ON DELETE CASCADE,
    embedding   vector NOT NULL,
    PRIMARY KEY (chunk_id, model_id)
);
CREATE INDEX embeddings_model_idx ON kb.embeddings (model_id);
COMMENT ON TABLE kb.embeddings IS 'One vector per (chunk, model); searched through the model''s partial HNSW index embeddings_hnsw_model_<id>.';

-- Keyword statistics for BM25, maintained by the trigger kb.chunks_maintain_stats.
CREATE TABLE kb.term_stats (
    lexeme  text PRIMARY KEY,
    df      integer NOT NULL CHECK (df >= 0)
);
COMMENT ON TABLE kb.term_stats IS 'Chunk frequency of each lexeme (number of chunks containing it), kept current by a trigger on kb.chunks.';

CREATE TABLE kb.corpus_stats (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    chunk_count   bigint NOT NULL DEFAULT 0,
    total_lexemes bigint NOT NULL DEFAULT 0
);
INSERT INTO kb.corpus_stats DEFAULT VALUES;
COMMENT ON TABLE kb.corpus_stats IS 'Single row: number of chunks and the sum of their lengths in distinct lexemes (length(tsv)), for BM25''s IDF and average chunk length.';

-- Typed relations between documents (the document graph).
CREATE TABLE kb.document_relations (
    source_id      uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    target_id      uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    relation_type  text NOT NULL CHECK (relation_type IN
                       ('references', 'supersedes', 'supplements', 'contradicts', 'depicts')),
    confidence     real CHECK (confidence BETWEEN 0 AND 1),
    evidence       text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, target_id, relation_type),
    CHECK (source_id <> target_id)
);
CREATE INDEX document_relations_target_idx ON kb.document_relations (target_id);
COMMENT ON TABLE kb.document_relations IS 'Typed edges between documents: one per (source, target, type), no self-loops.';

-- Values pgkb derives and keeps with the data (e.g. calibrated abstention thresholds).
CREATE TABLE kb.settings (
    key         text PRIMARY KEY,
    value       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.settings IS 'Derived settings stored with the knowledge base (e.g. calibrated thresholds), by key.';
"""

# >>> functions (generated by `python -m loader.devtools.snapshot`; do not edit by hand)
FUNCTIONS: dict[str, str | None] = {
    'activate_model': r"""-- kb.activate_model(model_name text, model_dims integer) -> integer
--
-- Makes the registered model (model_name, model_dims) the active one, atomically: queries that
-- do not name a model use the active model's embeddings from the moment this commits. Used to
-- switch to a new model after all chunks were embedded with it beside the old one, and to switch
-- back. Returns the model id; raises when the model is not registered.
CREATE OR REPLACE FUNCTION kb.activate_model(model_name text, model_dims integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    target integer;
BEGIN
    SELECT m.id INTO target
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims
       FOR UPDATE;
    IF target IS NULL THEN
        RAISE EXCEPTION 'embedding model % (% dims) is not registered', model_name, model_dims
            USING ERRCODE = 'no_data_found', HINT = 'register it with kb.register_model first';
    END IF;
    UPDATE kb.embedding_models SET is_active = false WHERE is_active AND id <> target;
    UPDATE kb.embedding_models SET is_active = true WHERE id = target;
    RETURN target;
END;
$$;

COMMENT ON FUNCTION kb.activate_model(text, integer) IS
'Atomically makes a registered embedding model the active one (the one searches use by default).';
""",
    'active_model': r"""-- kb.active_model() -> (id integer, name text, dims integer, provider text)
--
-- The active embedding model: the one whose vectors searches compare a query with when they are
-- not given a model. Returns no row before any model is registered.
CREATE OR REPLACE FUNCTION kb.active_model()
RETURNS TABLE (id integer, name text, dims integer, provider text)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = kb, public, pg_temp
AS $$
    SELECT m.id, m.name, m.dims, m.provider
      FROM kb.embedding_models m
     WHERE m.is_active;
$$;

COMMENT ON FUNCTION kb.active_model() IS
'The active embedding model (id, name, dims, provider); no row before one is registered.';
""",
    'chunks_maintain_stats': r"""-- kb.chunks_maintain_stats(): statement-level trigger keeping the keyword statistics current.
--
-- Fired AFTER INSERT, DELETE and UPDATE on kb.chunks with transition tables (new_rows, old_rows).
-- Maintains, in the same transaction as the change:
--   kb.term_stats(lexeme, df)   df = number of chunks whose tsv contains the lexeme;
--   kb.corpus_stats             chunk_count and total_lexemes (sum of length(tsv): distinct
--                               lexemes per chunk, the chunk length kb.keyword_search's BM25 uses),
-- the corpus statistics a BM25 ranking needs (IDF and average chunk length). Lexemes are
-- upserted in sorted order so concurrent writers cannot deadlock on kb.term_stats.
-- Returns NULL (statement triggers return nothing).
CREATE OR REPLACE FUNCTION kb.chunks_maintain_stats()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    delta_count  bigint := 0;
    delta_length bigint := 0;
    n            bigint;
    len          bigint;
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(length(o.tsv)), 0)
          INTO n, len
          FROM old_rows o;
        delta_count := delta_count - n;
        delta_length := delta_length - len;

        UPDATE kb.term_stats t
           SET df = t.df - d.df
          FROM (SELECT lex.lexeme, count(*) AS df
                  FROM old_rows o, unnest(o.tsv) AS lex
                 GROUP BY lex.lexeme) d
         WHERE t.lexeme = d.lexeme;
        DELETE FROM kb.term_stats WHERE df <= 0;
    END IF;

    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT count(*), coalesce(sum(length(nr.tsv)), 0)
          INTO n, len
          FROM new_rows nr;
        delta_count := delta_count + n;
        delta_length := delta_length + len;

        INSERT INTO kb.term_stats AS t (lexeme, df)
        SELECT lex.lexeme, count(*)
          FROM new_rows nr, unnest(nr.tsv) AS lex
         GROUP BY lex.lexeme
         ORDER BY lex.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = t.df + excluded.df;
    END IF;

    IF delta_count <> 0 OR delta_length <> 0 THEN
        UPDATE kb.corpus_stats
           SET chunk_count = chunk_count + delta_count,
               total_lexemes = total_lexemes + delta_length;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION kb.chunks_maintain_stats() IS
'Trigger: keeps kb.term_stats (chunk frequency per lexeme) and kb.corpus_stats (chunk count, sum of distinct lexemes per chunk) in step with kb.chunks, for BM25 ranking.';
""",
    'embeddings_check_dims': r"""-- kb.embeddings_check_dims(): row trigger on kb.embeddings (BEFORE INSERT OR UPDATE).
--
-- Refuses an embedding whose dimension differs from the dimension registered for its model in
-- kb.embedding_models, so that no vector can ever sit beside vectors of another shape in the
-- same model's space. Returns NEW when the dimensions agree; raises otherwise.
CREATE OR REPLACE FUNCTION kb.embeddings_check_dims()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    expected integer;
    model_name text;
BEGIN
    SELECT m.dims, m.name INTO expected, model_name
      FROM kb.embedding_models m
     WHERE m.id = NEW.model_id;
    IF expected IS NOT NULL AND vector_dims(NEW.embedding) <> expected THEN
        RAISE EXCEPTION 'embedding for chunk % has % dimensions, but model % (id %) has %',
            NEW.chunk_id, vector_dims(NEW.embedding), model_name, NEW.model_id, expected
            USING ERRCODE = 'data_exception',
                  HINT = 'embed with the registered model, or register the new model first';
    END IF;
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION kb.embeddings_check_dims() IS
'Trigger: rejects an embedding whose dimension differs from its model''s registered dims.';
""",
    'hybrid_search': r"""-- kb.hybrid_search(query_text text, query_embedding vector DEFAULT NULL, match_count integer DEFAULT 5,
--                  vector_candidates integer DEFAULT 20, keyword_candidates integer DEFAULT 20,
--                  rrf_k integer DEFAULT 60, vector_weight double precision DEFAULT 1.0,
--                  keyword_weight double precision DEFAULT 1.0, filters jsonb DEFAULT '{}',
--                  document_ids uuid[] DEFAULT NULL, min_similarity double precision DEFAULT NULL,
--                  model text DEFAULT NULL, keyword_ranking text DEFAULT 'bm25')
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             score, vector_rank, vector_similarity, keyword_rank, keyword_score,
--             category, metadata, token_count)
--
-- Hybrid retrieval: the top vector_candidates chunks of kb.vector_search and the top
-- keyword_candidates chunks of kb.keyword_search (same filters, document_ids), fused by
-- Reciprocal Rank Fusion:
--     score(chunk) = vector_weight / (rrf_k + vector_rank) + keyword_weight / (rrf_k + keyword_rank)
-- with ranks counted from 1 in each list, and a chunk missing from a list contributing 0 for
-- that list. Returns the match_count best chunks, ordered by score descending, ties broken by the
-- better (smaller) of the two ranks, then by the smaller chunk_id: deterministic.
-- Each row carries both retrievers' ranks and raw scores (vector_similarity = cosine similarity,
-- keyword_score = BM25 or ts_rank, see keyword_ranking), NULL where a chunk was not in that list,
-- so a caller can judge how strong the evidence is. query_embedding NULL means keyword-only
-- (a person in psql can search with text alone). min_similarity drops vector hits below it;
-- model selects the embedding model (default: the active one); wrong dimension or unknown model
-- raise. Any query_text returns rows or no rows, never an error. Reads only (STABLE), so it runs
-- on hot standbys. PARALLEL UNSAFE like kb.vector_search (it sets hnsw.ef_search).
CREATE OR REPLACE FUNCTION kb.hybrid_search(
    query_text text,
    query_embedding vector DEFAULT NULL,
    match_count integer DEFAULT 5,
    vector_candidates integer DEFAULT 20,
    keyword_candidates integer DEFAULT 20,
    rrf_k integer DEFAULT 60,
    vector_weight double precision DEFAULT 1.0,
    keyword_weight double precision DEFAULT 1.0,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    min_similarity double precision DEFAULT NULL,
    model text DEFAULT NULL,
    keyword_ranking text DEFAULT 'bm25')
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
SET search_path = kb, public, pg_temp
AS $$
BEGIN
    IF rrf_k IS NULL OR rrf_k < 0 THEN
        RAISE EXCEPTION 'rrf_k must be >= 0, got %', coalesce(rrf_k::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF vector_weight IS NULL OR vector_weight < 0 OR keyword_weight IS NULL OR keyword_weight < 0 THEN
        RAISE EXCEPTION 'weights must be >= 0, got vector_weight=%, keyword_weight=%',
            vector_weight, keyword_weight
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH v AS (
        SELECT vs.chunk_id, vs.rank, vs.similarity
          FROM kb.vector_search(query_embedding, vector_candidates, filters, document_ids,
                                min_similarity, model) AS vs
    ),
    k AS (
        SELECT ks.chunk_id, ks.rank, ks.score
          FROM kb.keyword_search(query_text, keyword_candidates, filters, document_ids,
                                 keyword_ranking) AS ks
    ),
    fused AS (
        SELECT coalesce(v.chunk_id, k.chunk_id) AS id,
               coalesce(vector_weight / (rrf_k + v.rank), 0)
                 + coalesce(keyword_weight / (rrf_k + k.rank), 0) AS score,
               v.rank AS v_rank, v.similarity AS v_sim, k.rank AS k_rank, k.score AS k_score
          FROM v FULL JOIN k ON k.chunk_id = v.chunk_id
    ),
    top AS (
        SELECT fu.*
          FROM fused fu
         ORDER BY fu.score DESC, least(fu.v_rank, fu.k_rank), fu.id
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

COMMENT ON FUNCTION kb.hybrid_search(text, vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text) IS
'Hybrid retrieval by Reciprocal Rank Fusion of kb.vector_search and kb.keyword_search: score = vector_weight/(rrf_k + vector_rank) + keyword_weight/(rrf_k + keyword_rank), ranks from 1, a chunk missing from a list adds 0, ties by the better rank then chunk_id. NULL query_embedding = keyword only. Returns both retrievers'' ranks and raw scores.';

REVOKE ALL ON FUNCTION kb.hybrid_search(text, vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.hybrid_search(text, vector, integer, integer, integer, integer, double precision, double precision, jsonb, uuid[], double precision, text, text) TO kb_reader;
    END IF;
END
$$;
""",
    'keyword_search': r"""-- kb.keyword_search(query_text text, match_count integer DEFAULT 20, filters jsonb DEFAULT '{}',
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
--      queries find their pages first; natural-language questions skip this step (on SciFact
--      it cost 0.005 nDCG@10);
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
""",
    'merge_neighbors': r"""-- kb.merge_neighbors(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
--   -> TABLE (hit_chunk_id, document_id, title, source_uri, chunk_start, chunk_end, heading_path,
--             content, token_count)
--
-- A search hit with its neighbours merged into one passage: the chunks of
-- kb.neighbor_chunks(chunk_id, before, after) joined in document order. Where a chunk begins with
-- the text the previous one ended with (the chunker's overlap), that text appears once; otherwise
-- the chunks are joined by a blank line. chunk_start/chunk_end are the first and last
-- chunk_index merged, heading_path is the hit's, token_count is the sum over the merged chunks
-- (an upper bound when they overlap). One row, or none when the chunk does not exist.
CREATE OR REPLACE FUNCTION kb.merge_neighbors(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
RETURNS TABLE (
    hit_chunk_id bigint,
    document_id uuid,
    title text,
    source_uri text,
    chunk_start integer,
    chunk_end integer,
    heading_path text,
    content text,
    token_count integer)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    part record;
    merged text;
    overlap integer;
    k integer;
    hit_heading text;
    first_index integer;
    last_index integer;
    tokens integer := 0;
    doc uuid;
BEGIN
    FOR part IN SELECT * FROM kb.neighbor_chunks(merge_neighbors.chunk_id, before, after) LOOP
        IF merged IS NULL THEN
            merged := part.content;
            first_index := part.chunk_index;
        ELSE
            -- the longest suffix of the text so far that starts this chunk (at most 4,000 chars)
            overlap := 0;
            FOR k IN REVERSE least(length(merged), length(part.content), 4000) .. 1 LOOP
                IF right(merged, k) = left(part.content, k) THEN
                    overlap := k;
                    EXIT;
                END IF;
            END LOOP;
            IF overlap > 0 THEN
                merged := merged || substr(part.content, overlap + 1);
            ELSE
                merged := merged || E'\n\n' || part.content;
            END IF;
        END IF;
        last_index := part.chunk_index;
        tokens := tokens + part.token_count;
        doc := part.document_id;
        IF part.is_hit THEN
            hit_heading := part.heading_path;
        END IF;
    END LOOP;
    IF merged IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT merge_neighbors.chunk_id, d.id, d.title, d.source_uri, first_index, last_index,
           hit_heading, merged, tokens
      FROM kb.documents d
     WHERE d.id = doc;
END;
$$;

COMMENT ON FUNCTION kb.merge_neighbors(bigint, integer, integer) IS
'A hit with its neighbouring chunks merged into one passage (overlap between consecutive chunks removed), with its chunk range, title and source.';

REVOKE ALL ON FUNCTION kb.merge_neighbors(bigint, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.merge_neighbors(bigint, integer, integer) TO kb_reader;
    END IF;
END
$$;
""",
    'neighbor_chunks': r"""-- kb.neighbor_chunks(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
--   -> TABLE (chunk_id, document_id, chunk_index, heading_path, content, token_count, is_hit boolean)
--
-- The chunk `chunk_id` (is_hit = true) with up to `before` chunks preceding it and up to `after`
-- chunks following it in the same document, in document order (chunk_index). Neighbours are the
-- nearest existing chunks, so gaps in chunk_index do not shorten the window. No rows when the
-- chunk does not exist; negative before/after count as 0. For one merged passage see
-- kb.merge_neighbors. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.neighbor_chunks(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    chunk_index integer,
    heading_path text,
    content text,
    token_count integer,
    is_hit boolean)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = kb, public, pg_temp
AS $$
    WITH hit AS (
        SELECT c.id, c.document_id, c.chunk_index
          FROM kb.chunks c
         WHERE c.id = neighbor_chunks.chunk_id
    ),
    window_ AS (
        SELECT h.id FROM hit h
        UNION ALL
        (SELECT p.id FROM hit h JOIN kb.chunks p
             ON p.document_id = h.document_id AND p.chunk_index < h.chunk_index
          ORDER BY p.chunk_index DESC
          LIMIT greatest(coalesce(neighbor_chunks.before, 0), 0))
        UNION ALL
        (SELECT s.id FROM hit h JOIN kb.chunks s
             ON s.document_id = h.document_id AND s.chunk_index > h.chunk_index
          ORDER BY s.chunk_index
          LIMIT greatest(coalesce(neighbor_chunks.after, 0), 0))
    )
    SELECT c.id, c.document_id, c.chunk_index, c.heading_path, c.content, c.token_count,
           c.id = neighbor_chunks.chunk_id
      FROM window_ w
      JOIN kb.chunks c ON c.id = w.id
     ORDER BY c.chunk_index;
$$;

COMMENT ON FUNCTION kb.neighbor_chunks(bigint, integer, integer) IS
'The chunk with up to `before` preceding and `after` following chunks of its document, in document order; is_hit marks the chunk itself.';

REVOKE ALL ON FUNCTION kb.neighbor_chunks(bigint, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.neighbor_chunks(bigint, integer, integer) TO kb_reader;
    END IF;
END
$$;
""",
    'read_document': r"""-- kb.read_document(document_id uuid, chunk_start integer DEFAULT NULL, chunk_end integer DEFAULT NULL,
--                  token_budget integer DEFAULT NULL)
--   -> TABLE (status text, document_id, title, source_uri, chunk_count integer, range_tokens integer,
--             chunk_id bigint, chunk_index integer, last_chunk_index integer, heading_path text,
--             content text, token_count integer)
--
-- Budget-guarded reading of a document, or of its chunks chunk_start..chunk_end (inclusive,
-- chunk_index; NULL = from the first / to the last). Every row repeats the document's title,
-- source_uri, chunk_count (all its chunks) and range_tokens (sum of token_count in the range).
--   status 'chunks':   the range fits token_budget (or no budget was given): one row per chunk, in
--                      order (chunk_index = last_chunk_index, content, token_count).
--   status 'outline':  it does not fit: no text, only the outline of the range, one row per
--                      section (a run of consecutive chunks with the same heading_path, from
--                      kb.chunks.heading_path) with its chunk range chunk_index..last_chunk_index
--                      and its tokens, so the caller can ask for a range that fits.
--   status 'empty':    the document exists but has no chunk in the range (one row, no chunk).
--   status 'not_found': there is no such document (one row, only document_id set).
-- Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.read_document(
    document_id uuid,
    chunk_start integer DEFAULT NULL,
    chunk_end integer DEFAULT NULL,
    token_budget integer DEFAULT NULL)
RETURNS TABLE (
    status text,
    document_id uuid,
    title text,
    source_uri text,
    chunk_count integer,
    range_tokens integer,
    chunk_id bigint,
    chunk_index integer,
    last_chunk_index integer,
    heading_path text,
    content text,
    token_count integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = kb, public, pg_temp
AS $$
    WITH doc AS (
        SELECT d.id, d.title, d.source_uri,
               (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::integer AS n
          FROM kb.documents d
         WHERE d.id = read_document.document_id
    ),
    part AS (
        SELECT c.id, c.chunk_index, c.heading_path, c.content, c.token_count
          FROM kb.chunks c
         WHERE c.document_id = read_document.document_id
           AND c.chunk_index >= coalesce(read_document.chunk_start, 0)
           AND c.chunk_index <= coalesce(read_document.chunk_end, 2147483647)
    ),
    total AS (
        SELECT count(*) AS n, coalesce(sum(p.token_count), 0)::integer AS tokens FROM part p
    ),
    verdict AS (
        SELECT CASE
                   WHEN NOT EXISTS (SELECT 1 FROM doc) THEN 'not_found'
                   WHEN t.n = 0 THEN 'empty'
                   WHEN read_document.token_budget IS NULL OR t.tokens <= read_document.token_budget
                       THEN 'chunks'
                   ELSE 'outline'
               END AS status,
               t.tokens
          FROM total t
    ),
    sections AS (  -- runs of consecutive chunks sharing a heading_path
        SELECT g.heading_path, min(g.chunk_index) AS first_index, max(g.chunk_index) AS last_index,
               sum(g.token_count)::integer AS tokens
          FROM (SELECT p.*,
                       row_number() OVER (ORDER BY p.chunk_index)
                         - row_number() OVER (PARTITION BY p.heading_path ORDER BY p.chunk_index) AS run
                  FROM part p) g
         GROUP BY g.heading_path, g.run
    )
    SELECT v.status, read_document.document_id, NULL::text, NULL::text, 0, 0,
           NULL::bigint, NULL::integer, NULL::integer, NULL::text, NULL::text, NULL::integer
      FROM verdict v WHERE v.status = 'not_found'
    UNION ALL
    SELECT v.status, d.id, d.title, d.source_uri, d.n, v.tokens,
           NULL, NULL, NULL, NULL, NULL, NULL
      FROM verdict v, doc d WHERE v.status = 'empty'
    UNION ALL
    (SELECT v.status, d.id, d.title, d.source_uri, d.n, v.tokens,
            p.id, p.chunk_index, p.chunk_index, p.heading_path, p.content, p.token_count
       FROM verdict v, doc d, part p WHERE v.status = 'chunks'
      ORDER BY p.chunk_index)
    UNION ALL
    (SELECT v.status, d.id, d.title, d.source_uri, d.n, v.tokens,
            NULL, s.first_index, s.last_index, s.heading_path, NULL, s.tokens
       FROM verdict v, doc d, sections s WHERE v.status = 'outline'
      ORDER BY s.first_index);
$$;

COMMENT ON FUNCTION kb.read_document(uuid, integer, integer, integer) IS
'Budget-guarded reader: the chunks of a document (or of chunk_start..chunk_end) in order when they fit token_budget (status chunks), otherwise only the outline: headings with chunk ranges and tokens (status outline); also empty, not_found.';

REVOKE ALL ON FUNCTION kb.read_document(uuid, integer, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.read_document(uuid, integer, integer, integer) TO kb_reader;
    END IF;
END
$$;
""",
    'register_model': r"""-- kb.register_model(model_name text, model_dims integer, model_provider text) -> integer
--
-- Registers an embedding model (name + dimensions = one vector space) and returns its id.
-- Idempotent: an already registered (name, dims) returns the existing id. Creates the model's
-- partial HNSW cosine index on kb.embeddings,
--     ((embedding::vector(dims)) vector_cosine_ops) WHERE model_id = id,
-- (pgvector indexes at most 2,000 dimensions; larger models are searched exactly, with a NOTICE).
-- The first model registered becomes the active one (see kb.activate_model).
CREATE OR REPLACE FUNCTION kb.register_model(model_name text, model_dims integer, model_provider text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    model_id integer;
BEGIN
    IF model_name IS NULL OR btrim(model_name) = '' THEN
        RAISE EXCEPTION 'model name must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF model_dims IS NULL OR model_dims < 1 OR model_dims > 16000 THEN
        RAISE EXCEPTION 'model dims must be between 1 and 16000, got %', model_dims
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    INSERT INTO kb.embedding_models (name, dims, provider, is_active)
    VALUES (model_name, model_dims, coalesce(model_provider, 'unknown'),
            NOT EXISTS (SELECT 1 FROM kb.embedding_models WHERE is_active))
    ON CONFLICT (name, dims) DO NOTHING;

    SELECT m.id INTO model_id
      FROM kb.embedding_models m
     WHERE m.name = model_name AND m.dims = model_dims;

    IF model_dims <= 2000 THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON kb.embeddings USING hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) WHERE model_id = %s',
            'embeddings_hnsw_model_' || model_id, model_dims, model_id);
    ELSE
        RAISE NOTICE 'model % has % dimensions; HNSW indexes at most 2000, searches will be exact',
            model_name, model_dims;
    END IF;
    RETURN model_id;
END;
$$;

COMMENT ON FUNCTION kb.register_model(text, integer, text) IS
'Registers an embedding model (name, dims, provider), creates its partial HNSW cosine index, returns its id; the first model becomes active.';
""",
    'search_filters': r"""-- kb.search_filters(filters jsonb) -> (category text[], metadata jsonb, source_pattern text)
--
-- Validates the filters object that kb.vector_search, kb.keyword_search and kb.hybrid_search
-- accept, and returns its parts as typed values that the searches bind as parameters (they are
-- never pasted into SQL text). Valid keys:
--   category   a string, or an array of strings (any of them): documents.category = ANY(...)
--   metadata   an object: documents.metadata @> metadata (JSONB containment)
--   source     a LIKE pattern on documents.source_uri, e.g. '%/sql-%' ('%' any text, '_' one char)
-- NULL or '{}' means no filter (all parts NULL). An unknown key, or a value of the wrong JSON
-- type, raises invalid_parameter_value naming the key and listing the valid keys.
CREATE OR REPLACE FUNCTION kb.search_filters(
    filters jsonb,
    OUT category text[],
    OUT metadata jsonb,
    OUT source_pattern text)
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    key text;
    value jsonb;
BEGIN
    IF filters IS NULL OR filters = 'null'::jsonb THEN
        RETURN;
    END IF;
    IF jsonb_typeof(filters) <> 'object' THEN
        RAISE EXCEPTION 'filters must be a JSON object, got %', jsonb_typeof(filters)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'valid keys: category, metadata, source';
    END IF;
    FOR key, value IN SELECT f.key, f.value FROM jsonb_each(filters) AS f LOOP
        CASE key
        WHEN 'category' THEN
            IF jsonb_typeof(value) = 'string' THEN
                category := ARRAY[value #>> '{}'];
            ELSIF jsonb_typeof(value) = 'array'
                  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(value) AS e
                                   WHERE jsonb_typeof(e) <> 'string') THEN
                category := ARRAY(SELECT jsonb_array_elements_text(value));
            ELSE
                RAISE EXCEPTION 'filter "category" must be a string or an array of strings, got %',
                    value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        WHEN 'metadata' THEN
            IF jsonb_typeof(value) <> 'object' THEN
                RAISE EXCEPTION 'filter "metadata" must be a JSON object (matched by containment), got %',
                    value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            metadata := value;
        WHEN 'source' THEN
            IF jsonb_typeof(value) <> 'string' THEN
                RAISE EXCEPTION 'filter "source" must be a string (a LIKE pattern on source_uri), got %',
                    value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            source_pattern := value #>> '{}';
        ELSE
            RAISE EXCEPTION 'unknown filter key "%"; valid keys are: category, metadata, source', key
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'category: string or array of strings; metadata: object (containment); '
                             'source: LIKE pattern on source_uri';
        END CASE;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION kb.search_filters(jsonb) IS
'Validates a search filters object (keys: category, metadata, source) and returns its typed parts; unknown keys raise an error listing the valid ones.';
""",
    'search_query': r"""-- kb.search_query(query_text text)
--   -> (strict_query tsquery, any_query tsquery, lexemes text[], excluded tsquery, negated text[],
--       identifiers text[], strict_first boolean)
--
-- Parses a user's search text once, for kb.keyword_search. Never raises, whatever the text:
--   strict_query  websearch_to_tsquery('english', text): "quoted phrases" as phrases, -word as
--                 NOT, 'or' as OR, every other word ANDed (NULL when it has no lexeme);
--   any_query     the OR of the text's positive lexemes (natural-language questions rarely
--                 contain every one of their words), NULL when there is none;
--   lexemes       those lexemes, distinct, in order of first appearance, at most 64;
--   excluded      the OR of the lexemes the text negates with -word (NULL when none);
--   negated       those negated lexemes (at most 64);
--   identifiers   the words joined by underscores, as written (work_mem, pg_stat_activity), at
--                 most 16: the parser splits maintenance_work_mem into three lexemes, so
--                 kb.keyword_search matches them against the text itself to rank exact
--                 occurrences (work_mem, not maintenance_work_mem) first;
--   strict_first  true when the text asks for exact matching: a "quoted phrase", or a word that
--                 looks like an identifier (with '_', or with both letters and digits: 40P01,
--                 pg_dump); kb.keyword_search then ranks the strict_query matches first.
--                 Natural-language questions without either are ranked by score alone.
-- The text is cut to its first 20,000 characters (a query is not a document).
CREATE OR REPLACE FUNCTION kb.search_query(
    query_text text,
    OUT strict_query tsquery,
    OUT any_query tsquery,
    OUT lexemes text[],
    OUT excluded tsquery,
    OUT negated text[],
    OUT identifiers text[],
    OUT strict_first boolean)
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = kb, public, pg_temp
SET client_min_messages = warning
AS $$
BEGIN
    strict_query := websearch_to_tsquery('english'::regconfig, left(coalesce(query_text, ''), 20000));
    SELECT (array_agg(w.word ORDER BY w.first_seen) FILTER (WHERE w.word ~ '[A-Za-z0-9]_[A-Za-z0-9]'))[1:16],
           coalesce(bool_or(true), false)
      INTO identifiers, strict_first
      FROM (SELECT m[1] AS word, min(n) AS first_seen
              FROM regexp_matches(left(coalesce(query_text, ''), 20000), '[A-Za-z0-9_]+', 'g')
                   WITH ORDINALITY AS r(m, n)
             WHERE length(m[1]) BETWEEN 2 AND 100
               AND (m[1] ~ '[A-Za-z0-9]_[A-Za-z0-9]' OR (m[1] ~ '[0-9]' AND m[1] ~ '[A-Za-z]'))
             GROUP BY m[1]) w;
    strict_first := strict_first OR position('"' IN left(coalesce(query_text, ''), 20000)) > 0;
    IF strict_query IS NULL OR numnode(strict_query) = 0 THEN
        strict_query := NULL;
        RETURN;
    END IF;
    -- the lexemes of the parsed query, each marked when preceded by the NOT operator
    SELECT array_agg(t.lexeme ORDER BY t.first_seen) FILTER (WHERE NOT t.is_negated),
           array_agg(t.lexeme ORDER BY t.first_seen) FILTER (WHERE t.is_negated)
      INTO lexemes, negated
      FROM (SELECT replace(m.parts[2], '''''', '''') AS lexeme,
                   bool_and(m.parts[1] = '!') AS is_negated,
                   min(m.n) AS first_seen
              FROM regexp_matches(strict_query::text, '(!?)''((?:[^'']|'''')+)''', 'g')
                   WITH ORDINALITY AS m(parts, n)
             GROUP BY 1) t;
    lexemes := lexemes[1:64];
    negated := negated[1:64];
    IF lexemes IS NOT NULL THEN
        any_query := (SELECT string_agg(
                                 '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
                        FROM unnest(lexemes) AS l)::tsquery;
    END IF;
    IF negated IS NOT NULL THEN
        excluded := (SELECT string_agg(
                                '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
                       FROM unnest(negated) AS l)::tsquery;
    END IF;
END;
$$;

COMMENT ON FUNCTION kb.search_query(text) IS
'Parses search text (never raises): websearch_to_tsquery strict query, OR-of-lexemes query, the positive lexemes (max 64), the negated ones as a query and an array, underscore identifiers as written, and whether strict matches go first.';
""",
    'vector_search': r"""-- kb.vector_search(query_embedding vector, match_count integer DEFAULT 20, filters jsonb DEFAULT '{}',
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
-- ef_search, or max(40, 2 * match_count) up to 1000, set for this call only: a selective filter
-- still returns match_count rows when that many chunks pass it.
-- filters: see kb.search_filters (category, metadata, source); document_ids restricts to those
-- documents; min_similarity drops hits below it (ranks count the kept ones). Filter values are
-- bound parameters, never SQL text. A NULL query_embedding returns no rows. An embedding whose
-- dimension differs from the model's, an unknown model, or no registered model raises an error
-- naming both. Reads only (STABLE); PARALLEL UNSAFE because it sets hnsw.ef_search, which
-- PostgreSQL refuses during a parallel query.
CREATE OR REPLACE FUNCTION kb.vector_search(
    query_embedding vector,
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
SET search_path = kb, public, pg_temp
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
    query_dims := vector_dims(query_embedding);
    IF model IS NULL THEN
        SELECT em.id, em.name, em.dims INTO m FROM kb.embedding_models em WHERE em.is_active;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no embedding model is registered, so there is nothing to search by vector'
                USING ERRCODE = 'no_data_found',
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
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'embed the question with the model the chunks were embedded with';
        END IF;
    END IF;
    IF query_dims <> m.dims THEN
        RAISE EXCEPTION 'query embedding has % dimensions, but model % (id %) has % dimensions',
            query_dims, m.name, m.id, m.dims
            USING ERRCODE = 'data_exception',
                  HINT = 'embed the question with the same model as the chunks';
    END IF;
    IF match_count IS NULL OR match_count < 1 THEN
        RETURN;
    END IF;

    PERFORM set_config('hnsw.ef_search',
                       least(1000, greatest(40, coalesce(ef_search, 2 * match_count)))::text, true);

    -- fixed condition texts; the values are bound as $3..$6
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

    RETURN QUERY EXECUTE format(
        $q$
        WITH nearest AS MATERIALIZED (
            SELECT e.chunk_id, e.embedding::vector(%1$s) <=> $1 AS distance
              FROM kb.embeddings e
              JOIN kb.chunks c ON c.id = e.chunk_id
              JOIN kb.documents d ON d.id = c.document_id
             WHERE e.model_id = %2$s%3$s
             ORDER BY e.embedding::vector(%1$s) <=> $1
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
          min_similarity;
END;
$$;

COMMENT ON FUNCTION kb.vector_search(vector, integer, jsonb, uuid[], double precision, text, integer) IS
'Vector retriever: nearest chunks by cosine distance through the model''s partial HNSW index with iterative scan (filters still return match_count rows); rank from 1, similarity = 1 - distance; wrong dims/model raise.';

REVOKE ALL ON FUNCTION kb.vector_search(vector, integer, jsonb, uuid[], double precision, text, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.vector_search(vector, integer, jsonb, uuid[], double precision, text, integer) TO kb_reader;
    END IF;
END
$$;
""",
}
PREVIOUS: dict[str, str | None] = {
    'activate_model': None,
    'active_model': None,
    'chunks_maintain_stats': None,
    'embeddings_check_dims': None,
    'hybrid_search': None,
    'keyword_search': None,
    'merge_neighbors': None,
    'neighbor_chunks': None,
    'read_document': None,
    'register_model': None,
    'search_filters': None,
    'search_query': None,
    'vector_search': None,
}
# <<< functions

POST_UP = r"""
CREATE TRIGGER chunks_stats_insert AFTER INSERT ON kb.chunks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();
CREATE TRIGGER chunks_stats_delete AFTER DELETE ON kb.chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();
CREATE TRIGGER chunks_stats_update AFTER UPDATE ON kb.chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();
CREATE TRIGGER embeddings_check_dims BEFORE INSERT OR UPDATE ON kb.embeddings
    FOR EACH ROW EXECUTE FUNCTION kb.embeddings_check_dims();

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT USAGE ON SCHEMA kb TO kb_reader;
    END IF;
END
$$;
"""

SCHEMA_DOWN = r"""
DROP TABLE IF EXISTS kb.settings, kb.document_relations, kb.embeddings, kb.chunks,
    kb.documents, kb.embedding_models, kb.term_stats, kb.corpus_stats CASCADE;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'kb'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', f);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        REVOKE ALL ON SCHEMA kb FROM kb_reader;
    END IF;
END
$$;
"""


def upgrade() -> None:
    conn = op.get_bind()
    run_sql(conn, SCHEMA_UP)
    apply_functions(op, FUNCTIONS)
    run_sql(conn, POST_UP)


def downgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_DOWN)
