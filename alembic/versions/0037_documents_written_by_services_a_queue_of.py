"""documents written by services: a queue of document jobs, submit and remove by collection grant

kb.document_jobs is the queue: every submission (kb.submit_document with text, kb.submit_file
with bytes and a MIME type) and removal (kb.remove_document) is a job recorded as pending in the
caller's transaction and announced on the channel kb_document_jobs; `pgkb worker` takes jobs with
kb.claim_document_job (FOR UPDATE SKIP LOCKED, a lease a dead worker's job is taken back after)
and ends them with kb.finish_document_job (ready, failed with its error, or retried later).
Writing is a grant of its own per collection: kb.collection_grants.can_write
(`pgkb db grant ROLE --write --collection NAME`), read by kb.writable_collections; readers
(kb_reader) may call the submit functions, which refuse a collection they may not write into.

Revision ID: 0037
Revises: 0036
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0037.sql
FUNCTIONS = (
    "claim_document_job",
    "collection_writable",
    "document_jobs",
    "enqueue_document",
    "finish_document_job",
    "remove_document",
    "submit_document",
    "submit_file",
    "writable_collections",
)

SCHEMA_UP = """
ALTER TABLE kb.collection_grants ADD COLUMN can_write boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN kb.collection_grants.can_write IS 'The role may also write into the collection: submit and remove documents (kb.submit_document, kb.submit_file, kb.remove_document).';

CREATE TABLE kb.document_jobs (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    action       text        NOT NULL CHECK (action IN ('put', 'remove')),
    collection   text        NOT NULL REFERENCES kb.collections (name) ON DELETE CASCADE,
    source_uri   text        NOT NULL CHECK (btrim(source_uri) <> '' AND length(source_uri) <= 2000),
    title        text,
    content      text,
    data         bytea,
    mime_type    text,
    metadata     jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    category     text,
    content_sha  text        NOT NULL,
    state        text        NOT NULL DEFAULT 'pending'
                             CHECK (state IN ('pending', 'processing', 'ready', 'failed')),
    attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    error        text,
    submitted_by text        NOT NULL DEFAULT session_user,
    submitted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    run_after    timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at   timestamptz,
    finished_at  timestamptz,
    lease_until  timestamptz,
    worker       text,
    document_id  uuid
);
COMMENT ON TABLE kb.document_jobs IS 'The write queue: one row per submitted document (put) or removal, with its state (pending, processing, ready, failed), attempts, error and times; written by kb.enqueue_document, taken by pgkb worker (kb.claim_document_job, kb.finish_document_job).';
CREATE INDEX document_jobs_queue_idx ON kb.document_jobs (run_after, submitted_at)
    WHERE state IN ('pending', 'processing');
CREATE INDEX document_jobs_source_idx ON kb.document_jobs (collection, source_uri, submitted_at);
CREATE INDEX document_jobs_submitted_idx ON kb.document_jobs (submitted_at);
REVOKE ALL ON kb.document_jobs FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON kb.document_jobs TO kb_writer;
    END IF;
END
$$;
"""

SCHEMA_DOWN = """
DROP TABLE kb.document_jobs;
ALTER TABLE kb.collection_grants DROP COLUMN can_write;
"""


def upgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), SCHEMA_DOWN)
