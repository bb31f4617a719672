-- kb.claim_document_job(worker text, lease_seconds integer DEFAULT 300) -> SETOF kb.document_jobs
--
-- A worker takes the next job: the oldest pending job whose run_after has come, or a
-- processing job whose lease ran out (its worker died: kill -9, a lost connection), provided no
-- older job of the same source is still queued (the jobs of one source are done in the order
-- they were submitted) and no other worker holds one of that source. The job becomes
-- processing, held by `worker` until now() + `lease_seconds` (clamped to 10..86400; the worker
-- renews it while it works: kb.finish_document_job(..., 'renew')), and its attempts count one more.
-- FOR UPDATE SKIP LOCKED: workers never take the same job. Returns that job, or no row.
-- For the loader (kb_writer), not for readers.
CREATE OR REPLACE FUNCTION kb.claim_document_job(
    worker text,
    lease_seconds integer DEFAULT 300
)
RETURNS SETOF kb.document_jobs
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE kb.document_jobs j
       SET state = 'processing',
           attempts = j.attempts + 1,
           worker = claim_document_job.worker,
           started_at = clock_timestamp(),
           lease_until = clock_timestamp()
                         + make_interval(secs => greatest(10, least(coalesce(lease_seconds, 300), 86400))),
           error = CASE WHEN j.state = 'processing'
                        THEN 'its worker (' || coalesce(j.worker, '?') || ') stopped while processing it'
                        ELSE j.error END
     WHERE j.id = (
        SELECT n.id
          FROM kb.document_jobs n
         WHERE ((n.state = 'pending' AND n.run_after <= clock_timestamp())
                OR (n.state = 'processing' AND n.lease_until < clock_timestamp()))
           AND NOT EXISTS (
                SELECT 1 FROM kb.document_jobs o
                 WHERE o.collection = n.collection AND o.source_uri = n.source_uri
                   AND o.id <> n.id
                   AND ((o.state = 'pending' AND o.submitted_at < n.submitted_at)
                        OR (o.state = 'processing' AND o.lease_until >= clock_timestamp())))
         ORDER BY n.run_after, n.submitted_at
         LIMIT 1
           FOR UPDATE SKIP LOCKED)
    RETURNING j.*;
$$;

COMMENT ON FUNCTION kb.claim_document_job(text, integer) IS
'A worker takes the next document job (oldest pending, or one whose worker''s lease ran out; one source''s jobs in order), FOR UPDATE SKIP LOCKED; returns it or no row.';

REVOKE ALL ON FUNCTION kb.claim_document_job(text, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.claim_document_job(text, integer) TO kb_writer;
    END IF;
END
$$;
