"""keyword leg: common words' postings merged by BM25 weight, flat scoring

Revision ID: 0018
Revises: 0017
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0018.sql
FUNCTIONS = ("keyword_search",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
