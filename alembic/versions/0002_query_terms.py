"""kb.query_terms: the abstention gate's term statistics (BM25 IDF) as a SQL function.

keyword_search's header without tuning history.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0002.sql
FUNCTIONS = (
    "keyword_search",
    "query_terms",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
