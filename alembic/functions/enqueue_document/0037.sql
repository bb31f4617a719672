-- kb.enqueue_document(action text, source_uri text, collection text, title text, content text,
--                     data bytea, mime_type text, metadata jsonb, category text) -> uuid
--
-- The one way a document job enters kb.document_jobs, behind kb.submit_document,
-- kb.submit_file and kb.remove_document (which check the caller may write into `collection`
-- first; this helper checks nothing of the caller and is granted to no one). `action` is 'put'
-- (add or replace the document `source_uri` of `collection` with `content`, or with `data` of
-- type `mime_type`) or 'remove'. The arguments are checked: a source of 1 to 2,000 characters,
-- a collection name kb.collections accepts (created when new), text or data of at most 100 MB,
-- metadata a JSON object; PK001 otherwise, naming the argument.
--
-- A job identical to the newest one of the same source (same action and the same title, text or
-- data, type, metadata and category) that is pending, processing or ready is not queued again:
-- its id is returned, so posting the same document twice changes nothing. A new job is recorded
-- 'pending' in the caller's transaction and announced on the channel kb_document_jobs (its id as
-- the payload) when that transaction commits; workers (`pgkb worker`) take it from there.
-- Returns the job's id.
CREATE OR REPLACE FUNCTION kb.enqueue_document(
    action text,
    source_uri text,
    collection text,
    title text,
    content text,
    data bytea,
    mime_type text,
    metadata jsonb,
    category text
)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    uri text := btrim(coalesce(enqueue_document.source_uri, ''));
    name text := coalesce(nullif(btrim(enqueue_document.collection), ''), 'default');
    meta jsonb := coalesce(enqueue_document.metadata, '{}'::jsonb);
    sha text;
    newest_id uuid;
    newest_sha text;
    newest_state text;
    job uuid;
BEGIN
    IF action NOT IN ('put', 'remove') THEN
        RAISE EXCEPTION 'action must be put or remove, got %', action USING ERRCODE = 'PK001';
    END IF;
    IF uri = '' OR length(uri) > 2000 THEN
        RAISE EXCEPTION 'source_uri must be 1 to 2000 characters, got %', length(uri)
            USING ERRCODE = 'PK001',
                  HINT = 'name the document by a stable identifier, e.g. a URL or a path';
    END IF;
    IF name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'collection % is not a collection name', quote_literal(name)
            USING ERRCODE = 'PK001',
                  HINT = 'use 1 to 63 letters, digits, _, . or -, starting with a letter or digit';
    END IF;
    IF jsonb_typeof(meta) <> 'object' THEN
        RAISE EXCEPTION 'metadata must be a JSON object, got %', jsonb_typeof(meta)
            USING ERRCODE = 'PK001', HINT = 'e.g. {"team": "hr"}';
    END IF;
    IF action = 'put' THEN
        IF content IS NULL AND data IS NULL THEN
            RAISE EXCEPTION 'the document % has no content', quote_literal(uri)
                USING ERRCODE = 'PK001', HINT = 'give its text, or its bytes with their MIME type';
        END IF;
        IF content IS NOT NULL AND btrim(content) = '' THEN
            RAISE EXCEPTION 'the document % is empty', quote_literal(uri) USING ERRCODE = 'PK001';
        END IF;
        IF coalesce(octet_length(content), 0) + coalesce(octet_length(data), 0) > 100 * 1024 * 1024 THEN
            RAISE EXCEPTION 'the document % is over 100 MB', quote_literal(uri)
                USING ERRCODE = 'PK001', HINT = 'split it, or ingest the file with pgkb ingest';
        END IF;
        IF data IS NOT NULL AND coalesce(btrim(mime_type), '') = '' THEN
            RAISE EXCEPTION 'the file % needs its MIME type', quote_literal(uri)
                USING ERRCODE = 'PK001', HINT = 'e.g. text/markdown, text/html or application/pdf';
        END IF;
    END IF;
    sha := encode(sha256(convert_to(concat_ws(E'\x1f', action, title, category, meta::text,
                                              mime_type), 'UTF8')
                         || coalesce(convert_to(content, 'UTF8'), '\x'::bytea)
                         || coalesce(data, '\x'::bytea)), 'hex');
    -- one submission of a source at a time: the newest job of this source, locked
    PERFORM pg_advisory_xact_lock(hashtextextended(name || E'\x1f' || uri, 0));
    SELECT j.id, j.content_sha, j.state INTO newest_id, newest_sha, newest_state
      FROM kb.document_jobs j
     WHERE j.collection = name AND j.source_uri = uri
     ORDER BY j.submitted_at DESC
     LIMIT 1;
    IF newest_sha = sha AND newest_state IN ('pending', 'processing', 'ready') THEN
        RETURN newest_id;
    END IF;
    IF action = 'remove'
       AND NOT EXISTS (SELECT 1 FROM kb.documents d WHERE d.collection = name AND d.source_uri = uri)
       AND coalesce(newest_state NOT IN ('pending', 'processing'), true) THEN
        RAISE EXCEPTION 'no document % in collection %', quote_literal(uri), quote_literal(name)
            USING ERRCODE = 'PK020', HINT = 'pgkb docs list shows the documents and their sources';
    END IF;
    INSERT INTO kb.collections (name) VALUES (name) ON CONFLICT DO NOTHING;
    INSERT INTO kb.document_jobs
           (action, collection, source_uri, title, content, data, mime_type, metadata, category,
            content_sha)
    VALUES (action, name, uri, nullif(btrim(title), ''), content, data, nullif(btrim(mime_type), ''),
            meta, nullif(btrim(category), ''), sha)
    RETURNING id INTO job;
    PERFORM pg_notify('kb_document_jobs', job::text);
    RETURN job;
END;
$$;

COMMENT ON FUNCTION kb.enqueue_document(text, text, text, text, text, bytea, text, jsonb, text) IS
'Records a document job (put or remove) as pending and announces it on kb_document_jobs; an identical newest job of the same source is returned instead. Behind kb.submit_document, kb.submit_file and kb.remove_document; granted to no one.';

REVOKE ALL ON FUNCTION kb.enqueue_document(text, text, text, text, text, bytea, text, jsonb, text) FROM PUBLIC;
