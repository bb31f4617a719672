"""pg_textsearch top-k scores from the index scan

kb.keyword_search_pg_textsearch takes each top-k candidate's BM25 score from the index scan that
found it (pg_textsearch's bm25_get_current_score(), the extension's schema on the search path for
the call so its planner hook can hand the scores over) instead of scoring the chunk's text again
in the select list (about 0.1 ms a row: 2 ms for one collection's top 20, 60 ms for 30
collections), and builds its statement of nested subqueries instead of CTEs, which the hook does
not look into. Same rows, ranks and scores. kb.keyword_backend's auto serves calls over at most 8
collections holding chunks with pg_textsearch (was 2; kb.keyword_backend_status says so).

Revision ID: 0030
Revises: 0029
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0030.sql
FUNCTIONS = (
    "keyword_backend",
    "keyword_backend_status",
    "keyword_search_pg_textsearch",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
