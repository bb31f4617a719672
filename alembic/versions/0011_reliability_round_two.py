"""reliability, second review: non-finite weights refused in kb.hybrid_search and
kb.keyword_search; kb.cancel_overdue_queries, an administrator's watchdog for kb_reader

Revision ID: 0011
Revises: 0010
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0011.sql
FUNCTIONS = (
    "cancel_overdue_queries",
    "explore_graph",
    "hybrid_search",
    "keyword_search",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
