"""Hints name the moved commands

Revision ID: 0023
Revises: 0022
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0023.sql
FUNCTIONS = (
    "activate_model",
    "chunks_missing_embedding",
    "stale_documents",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
