"""pg_textsearch keyword leg: strict, identifier and quoted matches from a deep top-k scored by the index

Revision ID: 0035
Revises: 0034
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0035.sql
FUNCTIONS = ("keyword_search_pg_textsearch",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
