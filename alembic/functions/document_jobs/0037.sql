-- kb.document_jobs(job_state text DEFAULT NULL, max_rows integer DEFAULT 100, job_id uuid DEFAULT NULL)
--   -> TABLE(id, action, collection, source_uri, title, mime_type, category, state, attempts,
--            error, submitted_by, submitted_at, started_at, finished_at, run_after, document_id,
--            chunks)
--
-- The document jobs of the collections the caller may read (kb.collection_scope(NULL)), newest
-- first: each submission's state (pending, processing, ready, failed), its attempts, its last
-- error and its times, and for a ready put the document's id and chunk count. `job_state` keeps one
-- state (NULL: all; PK001 for another value); `job_id` one job; at most `max_rows` rows
-- (clamped to 1..1000). Never the submitted text or bytes. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.document_jobs(
    job_state text DEFAULT NULL,
    max_rows integer DEFAULT 100,
    job_id uuid DEFAULT NULL
)
RETURNS TABLE (
    id uuid,
    action text,
    collection text,
    source_uri text,
    title text,
    mime_type text,
    category text,
    state text,
    attempts integer,
    error text,
    submitted_by text,
    submitted_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    run_after timestamptz,
    document_id uuid,
    chunks bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    names text[] := kb.collection_scope(NULL);
BEGIN
    IF job_state IS NOT NULL AND job_state NOT IN ('pending', 'processing', 'ready', 'failed') THEN
        RAISE EXCEPTION 'state must be pending, processing, ready or failed, got %',
            quote_literal(job_state) USING ERRCODE = 'PK001';
    END IF;
    RETURN QUERY
    SELECT j.id, j.action, j.collection, j.source_uri, coalesce(d.title, j.title), j.mime_type,
           j.category, j.state, j.attempts, j.error, j.submitted_by, j.submitted_at,
           j.started_at, j.finished_at, j.run_after, j.document_id,
           (SELECT count(*) FROM kb.chunks c WHERE c.document_id = j.document_id)
      FROM kb.document_jobs j
      LEFT JOIN kb.documents d ON d.id = j.document_id
     WHERE (names IS NULL OR j.collection = ANY (names))
       AND (document_jobs.job_state IS NULL OR j.state = document_jobs.job_state)
       AND (document_jobs.job_id IS NULL OR j.id = document_jobs.job_id)
     ORDER BY j.submitted_at DESC, j.id
     LIMIT greatest(1, least(coalesce(max_rows, 100), 1000));
END;
$$;

COMMENT ON FUNCTION kb.document_jobs(text, integer, uuid) IS
'The document jobs (submissions and removals) of the caller''s collections, newest first: state, attempts, error, times, and the document''s id and chunks once ready; max_rows clamped to 1..1000.';

REVOKE ALL ON FUNCTION kb.document_jobs(text, integer, uuid) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.document_jobs(text, integer, uuid) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.document_jobs(text, integer, uuid) TO kb_writer;
    END IF;
END
$$;
