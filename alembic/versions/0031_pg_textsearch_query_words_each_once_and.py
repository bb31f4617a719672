"""pg_textsearch query words each once and identifier candidates

Revision ID: 0031
Revises: 0030
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0031.sql
FUNCTIONS = ("keyword_search_pg_textsearch",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
