"""training passages for models tune

Revision ID: 0025
Revises: 0024
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0025.sql
FUNCTIONS = ("training_passages",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
