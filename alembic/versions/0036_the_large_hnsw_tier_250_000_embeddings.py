"""The large HNSW tier (250,000 embeddings or more): m 48, ef_construction 200, ef_search 400 (was m 32, 128, 800)

Revision ID: 0036
Revises: 0035
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0036.sql
FUNCTIONS = ("hnsw_parameters",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
