"""Search text with a run of dashes (pasted psql output) parses instead of failing.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0016.sql
FUNCTIONS = ("search_query",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
