"""kb.search_relations: what searches read, for sizing shared_buffers

Revision ID: 0021
Revises: 0020
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0021.sql
FUNCTIONS = ("search_relations",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
