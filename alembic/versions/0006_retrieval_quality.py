"""retrieval quality

Revision ID: 0006
Revises: 0005
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0006.sql
FUNCTIONS = (
    "hybrid_search",
    "vector_search",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
