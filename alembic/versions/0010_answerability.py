"""fusion weighs the keyword leg by its evidence; abstention signals

Revision ID: 0010
Revises: 0009
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0010.sql
FUNCTIONS = (
    "hybrid_search",
    "pseudo_queries",
    "similarity_profile",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
