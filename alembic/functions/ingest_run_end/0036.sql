-- kb.ingest_run_end(run_id bigint, report jsonb) -> void
--
-- Records the end of an ingestion run started by kb.ingest_run_begin: finished_at = now() and,
-- from report (the loader's run summary, `pgkb ingest --json`), the counts new, changed,
-- unchanged, pruned, failed (a number, or an array whose length counts), chunks_written, the
-- exit_code and aborted (why the run stopped early, or null). Missing keys leave NULL. When
-- failed is an array of {source, reason}, its first 100 entries are kept in failures (each text
-- cut to 1,000 characters), so the run log names what failed and why. Raises PK020 for an
-- unknown run_id. EXECUTE for kb_writer only.
CREATE OR REPLACE FUNCTION kb.ingest_run_end(run_id bigint, report jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE kb.ingest_runs r
       SET finished_at = pg_catalog.now(),
           docs_new = (report ->> 'new')::integer,
           docs_changed = (report ->> 'changed')::integer,
           docs_unchanged = (report ->> 'unchanged')::integer,
           docs_pruned = (report ->> 'pruned')::integer,
           docs_failed = CASE pg_catalog.jsonb_typeof(report -> 'failed')
                             WHEN 'array' THEN pg_catalog.jsonb_array_length(report -> 'failed')
                             ELSE (report ->> 'failed')::integer END,
           chunks_written = (report ->> 'chunks_written')::integer,
           exit_code = (report ->> 'exit_code')::integer,
           error = report ->> 'aborted',
           failures = CASE pg_catalog.jsonb_typeof(report -> 'failed')
                          WHEN 'array' THEN coalesce((
                              SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                         'source', pg_catalog.left(e.value ->> 'source', 1000),
                                         'reason', pg_catalog.left(e.value ->> 'reason', 1000))
                                     ORDER BY e.ord)
                                FROM pg_catalog.jsonb_array_elements(report -> 'failed')
                                         WITH ORDINALITY AS e(value, ord)
                               WHERE e.ord <= 100
                                 AND pg_catalog.jsonb_typeof(e.value) = 'object'), '[]'::jsonb)
                          ELSE '[]'::jsonb END
     WHERE r.id = run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no ingestion run has id %', run_id USING ERRCODE = 'PK020';
    END IF;
END;
$$;

COMMENT ON FUNCTION kb.ingest_run_end(bigint, jsonb) IS
'Records the end of an ingestion run: finish time, counts new/changed/unchanged/pruned/failed, the failed sources with their reasons (first 100), chunks written, exit code, error.';

REVOKE ALL ON FUNCTION kb.ingest_run_end(bigint, jsonb) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.ingest_run_end(bigint, jsonb) TO kb_writer;
    END IF;
END
$$;
