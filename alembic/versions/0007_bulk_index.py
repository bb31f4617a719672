"""bulk index

Revision ID: 0007
Revises: 0006
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0007.sql
FUNCTIONS = ("drop_model_index",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
