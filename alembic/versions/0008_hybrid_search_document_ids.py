"""hybrid search takes document ids from its legs

Revision ID: 0008
Revises: 0007
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0008.sql
FUNCTIONS = ("hybrid_search",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
