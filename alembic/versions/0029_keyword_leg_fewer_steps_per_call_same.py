"""keyword leg: fewer steps per call, same results

Revision ID: 0029
Revises: 0028
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0029.sql
FUNCTIONS = (
    "keyword_search",
    "search_query",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
