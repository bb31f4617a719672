"""Errors by code: pgkb's SQL functions raise SQLSTATE class PK

Every RAISE EXCEPTION of a kb function raises one of pgkb's own codes (loader.errors.SqlState,
class PK) instead of a PostgreSQL condition (invalid_parameter_value, no_data_found,
data_exception, object_not_in_prerequisite_state), so callers tell errors apart by code, never
by message text; the messages are unchanged. Headers name the codes.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0022.sql
FUNCTIONS = (
    "activate_model",
    "build_model_index",
    "cancel_overdue_queries",
    "collection_scope",
    "document_list",
    "drop_model",
    "drop_model_index",
    "embeddings_check_dims",
    "explore_graph",
    "hybrid_search",
    "ingest_run_end",
    "keyword_search",
    "register_model",
    "search_filters",
    "stale_documents",
    "stats",
    "vector_search",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
