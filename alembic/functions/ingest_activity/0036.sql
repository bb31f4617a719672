-- kb.ingest_activity(max_runs integer DEFAULT 10)
--   -> TABLE (run_id bigint, started_at timestamptz, finished_at timestamptz, running boolean,
--             paths text[], docs_new integer, docs_changed integer, docs_unchanged integer,
--             docs_pruned integer, docs_failed integer, chunks_written integer,
--             exit_code integer, error text, failures jsonb)
--
-- The newest max_runs (clamped to 1..100) ingestion runs of kb.ingest_runs, newest first: what
-- each did, how it ended, and the sources it failed on (failures: [{source, reason}], the first
-- 100). running is true for the newest unfinished run while an ingestion holds pgkb's
-- ingestion lock (an unfinished run without it stopped without recording its end). The run log
-- names paths of every collection, so only a session that may read every collection (kb.
-- collection_scope(NULL) is NULL: not narrowed by its grants nor by pgkb.collections) gets
-- rows; any other gets none. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.ingest_activity(max_runs integer DEFAULT 10)
RETURNS TABLE (
    run_id bigint,
    started_at timestamptz,
    finished_at timestamptz,
    running boolean,
    paths text[],
    docs_new integer,
    docs_changed integer,
    docs_unchanged integer,
    docs_pruned integer,
    docs_failed integer,
    chunks_written integer,
    exit_code integer,
    error text,
    failures jsonb)
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH locked AS (  -- pgkb's ingestion lock ('pgkb' + 1, loader/ingest/writer.py) is held
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                        WHERE l.locktype = 'advisory' AND l.granted
                          AND l.classid = 1885825890::oid AND l.objid = 1::oid
                          AND l.objsubid = 1) AS held
    ),
    newest_open AS (
        SELECT max(r.id) AS id FROM kb.ingest_runs r WHERE r.finished_at IS NULL
    )
    SELECT r.id, r.started_at, r.finished_at,
           r.finished_at IS NULL AND r.id = (SELECT n.id FROM newest_open n)
               AND (SELECT k.held FROM locked k),
           r.paths, r.docs_new, r.docs_changed, r.docs_unchanged, r.docs_pruned, r.docs_failed,
           r.chunks_written, r.exit_code, r.error, r.failures
      FROM kb.ingest_runs r
     WHERE kb.collection_scope(NULL) IS NULL
     ORDER BY r.id DESC
     LIMIT least(greatest(coalesce(ingest_activity.max_runs, 10), 1), 100);
$$;

COMMENT ON FUNCTION kb.ingest_activity(integer) IS
'The newest ingestion runs (whether one is running now, counts, error, the failed sources with reasons), only for a session that may read every collection. Maximum: 100 runs.';

REVOKE ALL ON FUNCTION kb.ingest_activity(integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.ingest_activity(integer) TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.ingest_activity(integer) TO kb_writer;
    END IF;
END
$$;
