"""pg_textsearch query words each once and identifier candidates

Revision ID: 0032
Revises: 0031
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0032.sql
FUNCTIONS = ("keyword_search_pg_textsearch",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
