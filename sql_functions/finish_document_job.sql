-- kb.finish_document_job(job_id uuid, worker text, outcome text, error text DEFAULT NULL,
--                        retry_seconds double precision DEFAULT NULL,
--                        document_id uuid DEFAULT NULL) -> boolean
--
-- The worker `worker` ends its job `job_id`: `outcome` 'ready' (with the document's id for a
-- put), 'failed' (with `error`, a sentence for the user), or 'retry' (a transient failure: back
-- to pending with `error`, to run again after `retry_seconds`, clamped to 0..86400). The
-- submitted text and bytes are dropped once the job is ready (a failed job keeps them, so it
-- can be submitted again). Only while the worker
-- still holds the job (its lease may have run out and another worker taken it): false
-- otherwise, and nothing changes. `outcome` 'renew' extends the lease by `retry_seconds` (default
-- 300) and changes nothing else. For the loader (kb_writer).
CREATE OR REPLACE FUNCTION kb.finish_document_job(
    job_id uuid,
    worker text,
    outcome text,
    error text DEFAULT NULL,
    retry_seconds double precision DEFAULT NULL,
    document_id uuid DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seconds double precision := greatest(0, least(coalesce(retry_seconds, 300), 86400));
BEGIN
    IF outcome NOT IN ('ready', 'failed', 'retry', 'renew') THEN
        RAISE EXCEPTION 'outcome must be ready, failed, retry or renew, got %', quote_literal(outcome)
            USING ERRCODE = 'PK001';
    END IF;
    UPDATE kb.document_jobs j
       SET state = CASE outcome WHEN 'retry' THEN 'pending' WHEN 'renew' THEN 'processing'
                                ELSE outcome END,
           error = CASE WHEN outcome = 'renew' THEN j.error
                        WHEN outcome = 'ready' THEN NULL
                        ELSE finish_document_job.error END,
           run_after = CASE WHEN outcome = 'retry'
                            THEN clock_timestamp() + make_interval(secs => seconds)
                            ELSE j.run_after END,
           lease_until = CASE WHEN outcome = 'renew'
                              THEN clock_timestamp() + make_interval(secs => seconds)
                              ELSE NULL END,
           finished_at = CASE WHEN outcome IN ('ready', 'failed') THEN clock_timestamp()
                              ELSE j.finished_at END,
           document_id = coalesce(finish_document_job.document_id, j.document_id),
           worker = CASE WHEN outcome IN ('renew') THEN j.worker ELSE NULL END,
           content = CASE WHEN outcome = 'ready' THEN NULL ELSE j.content END,
           data = CASE WHEN outcome = 'ready' THEN NULL ELSE j.data END
     WHERE j.id = job_id AND j.state = 'processing' AND j.worker = finish_document_job.worker;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION kb.finish_document_job(uuid, text, text, text, double precision, uuid) IS
'A worker ends (ready, failed), reschedules (retry) or keeps (renew) the document job it holds; false when it no longer holds it.';

REVOKE ALL ON FUNCTION kb.finish_document_job(uuid, text, text, text, double precision, uuid) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.finish_document_job(uuid, text, text, text, double precision, uuid) TO kb_writer;
    END IF;
END
$$;
