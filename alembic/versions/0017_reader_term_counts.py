"""A granted reader's term counts the cheaper way.

The fusion's keyword evidence from the statistics.

Revision ID: 0017
Revises: 0016
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0017.sql
FUNCTIONS = (
    "hybrid_search",
    "term_df",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
