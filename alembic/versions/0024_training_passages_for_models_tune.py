"""training passages for models tune

Revision ID: 0024
Revises: 0023
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0024.sql
FUNCTIONS = ("training_passages",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
