"""The web interface's reads; the run log keeps failed sources

kb.document_page (one page of the catalogue: filters, type, words of the title, sort, stale flag,
total), kb.document_facets (the values its filter menus offer) and kb.ingest_activity (the
newest runs, whether one is running, the failed sources) are new, for kb_reader. kb.ingest_runs
gets failures (jsonb, the first 100 {source, reason} of a run), which kb.ingest_run_end now
fills from the run's report.

Faster reads for the web pages (the same results): kb.explore_graph and kb.document_page plan each
call for its own arguments (plan_cache_mode = force_custom_plan: after five calls PL/pgSQL's
generic plan walked the graph of the whole manual in 800 ms instead of 90); kb.stats counts the
relations by joining them to their two documents (the join with its documents CTE had become a
nested loop of 1,169 x 1,169 index probes, seconds) and the models' coverage without checking
every vector's dimensions; kb.document_page and kb.show_document read the caller's collections
once instead of once per edge.

Revision ID: 0028
Revises: 0027
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0028.sql
FUNCTIONS = (
    "document_facets",
    "document_page",
    "explore_graph",
    "ingest_activity",
    "ingest_run_end",
    "show_document",
    "stats",
)

# Before the functions: kb.ingest_run_end and kb.ingest_activity name the column.
SCHEMA_UP = """
ALTER TABLE kb.ingest_runs ADD COLUMN failures jsonb NOT NULL DEFAULT '[]'::jsonb
    CONSTRAINT ingest_runs_failures_check CHECK (jsonb_typeof(failures) = 'array');
COMMENT ON COLUMN kb.ingest_runs.failures IS
'The sources the run could not ingest: [{source, reason}], the first 100.';
"""
# After the functions went back to their older text (none of which reads the column).
SCHEMA_DOWN = "ALTER TABLE kb.ingest_runs DROP COLUMN failures"


def upgrade() -> None:
    op.execute(SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    op.execute(SCHEMA_DOWN)
