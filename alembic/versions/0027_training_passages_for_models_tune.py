"""training passages for models tune

Revision ID: 0027
Revises: 0026
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0027.sql
FUNCTIONS = ("training_passages",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
