"""fusion with lead slots: a confident leg's best chunk is placed within the first rows

kb.hybrid_search gains lead_slot (default 3): the vector leg's rank-1 chunk, and the keyword
leg's when the query asks for exact matching or its best chunk holds at least half the query's
IDF mass, are placed within the first lead_slot rows; keyword_weight defaults to 1.5 and
keyword_confidence to 2 (a keyword leg that matched only common words steps back faster).

Revision ID: 0013
Revises: 0012
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0013.sql
FUNCTIONS = ("hybrid_search",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
