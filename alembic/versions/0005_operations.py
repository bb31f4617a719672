"""Operations: ingestion run log, model config, the kb_writer role, stats/staleness/removal and
model-management functions.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SCHEMA_UP = r"""
-- The role for loaders (pgkb ingest, reembed, remove run by a service): writes the kb tables,
-- calls the maintenance functions. Created before the functions, whose files grant to it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        CREATE ROLE kb_writer NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role kb_writer (no CREATEROLE privilege); create it and re-grant';
END
$$;

CREATE TABLE kb.ingest_runs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    paths           text[] NOT NULL DEFAULT '{}',
    docs_new        integer,
    docs_changed    integer,
    docs_unchanged  integer,
    docs_pruned     integer,
    docs_failed     integer,
    chunks_written  integer,
    exit_code       integer,
    error           text,
    db_user         text NOT NULL DEFAULT current_user
);
COMMENT ON TABLE kb.ingest_runs IS 'One row per ingestion run (kb.ingest_run_begin / kb.ingest_run_end): when, what paths, what it did, how it ended; finished_at NULL = did not finish.';

ALTER TABLE kb.embedding_models
    ADD COLUMN config jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(config) = 'object');
COMMENT ON COLUMN kb.embedding_models.config IS 'What pgkb needs to embed with the model again (base_url, max_input_tokens); never an API key.';
"""  # noqa: E501 (landed SQL, kept byte for byte)

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0005.sql
FUNCTIONS = (
    "activate_model",
    "build_model_index",
    "chunks_missing_embedding",
    "drop_model",
    "ingest_run_begin",
    "ingest_run_end",
    "models",
    "register_model",
    "remove_documents",
    "stale_documents",
    "stats",
)

POST_UP = r"""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT USAGE ON SCHEMA kb TO kb_writer;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA kb TO kb_writer;
        REVOKE INSERT, UPDATE, DELETE ON kb.alembic_version FROM kb_writer;
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA kb TO kb_writer;
        GRANT EXECUTE ON FUNCTION kb.active_model() TO kb_writer;
    END IF;
END
$$;
"""

SCHEMA_DOWN = r"""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA kb FROM kb_writer;
        REVOKE ALL ON ALL SEQUENCES IN SCHEMA kb FROM kb_writer;
        REVOKE ALL ON ALL FUNCTIONS IN SCHEMA kb FROM kb_writer;
        REVOKE ALL ON SCHEMA kb FROM kb_writer;
    END IF;
END
$$;
-- kb.activate_model keeps its signature (and so its ACL) through the revert: give it back
GRANT EXECUTE ON FUNCTION kb.activate_model(text, integer) TO PUBLIC;
DROP TABLE IF EXISTS kb.ingest_runs;
ALTER TABLE kb.embedding_models DROP COLUMN IF EXISTS config;
"""


def upgrade() -> None:
    conn = op.get_bind()
    run_sql(conn, SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(conn, POST_UP)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), SCHEMA_DOWN)
