-- kb.ingest_run_begin(paths text[]) -> bigint
--
-- Records the start of an ingestion run in kb.ingest_runs (started_at = now(), the paths it was
-- given, the database user) and returns the run's id, for kb.ingest_run_end. A run that never
-- ends (killed) keeps finished_at NULL, which `pgkb stats` shows as "did not finish".
-- EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.ingest_run_begin(paths text[])
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO kb.ingest_runs (paths) VALUES (coalesce(paths, '{}')) RETURNING id;
$$;

COMMENT ON FUNCTION kb.ingest_run_begin(text[]) IS
'Records the start of an ingestion run (kb.ingest_runs) and returns its id.';

REVOKE ALL ON FUNCTION kb.ingest_run_begin(text[]) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.ingest_run_begin(text[]) TO kb_writer;
    END IF;
END
$$;
