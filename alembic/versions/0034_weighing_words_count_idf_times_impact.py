"""Weighing words count idf times impact

kb.keyword_search's weighing words read from kb.term_postings (held by 101 to 1,000 chunks,
beyond the rarest words' budget) give each of their chunks idf * impact (the word's BM25
term-frequency part in that chunk, as the common words' postings already do) instead of idf
alone, so the choice of the candidates to score follows BM25 more closely: the top 20 equal the
exact BM25 for more questions, at the same cost. Rankings change; the eval gate holds on every
recorded set.

Revision ID: 0034
Revises: 0033
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0034.sql
FUNCTIONS = ("keyword_search",)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
