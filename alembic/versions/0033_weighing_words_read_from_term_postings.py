"""Weighing words read from term postings

kb.term_postings holds every posting of the lexemes held by more than 100 chunks of the database
(was 1,000), kept so by the statistics trigger and kb.rebuild_keyword_stats; kb.keyword_search
reads the chunk ids of its weighing words held by more than 100 chunks from it (an index-only
read) instead of their chunks' rows through the GIN index: the same candidates, the same
weights, the same rows. The upgrade recomputes the keyword statistics once (set-wise); the
downgrade deletes the postings of the lexemes held by 1,000 chunks or fewer.

Revision ID: 0033
Revises: 0032
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0033.sql
FUNCTIONS = (
    "chunks_maintain_stats",
    "keyword_search",
    "rebuild_keyword_stats",
)


COMMENT = (
    "COMMENT ON TABLE kb.term_postings IS 'Impact-ordered postings of the lexemes held by more "
    "than {n} chunks (impact: kb.term_impacts), kept current by the statistics trigger on "
    "kb.chunks; kb.keyword_search reads a common word''s best chunks from it.';"
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), "SELECT kb.rebuild_keyword_stats();" + COMMENT.format(n=100))


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(
        op.get_bind(),
        """
DELETE FROM kb.term_postings p
 WHERE p.lexeme IN (SELECT t.lexeme FROM kb.collection_term_stats t
                     GROUP BY t.lexeme HAVING sum(t.df) <= 1000);
"""
        + COMMENT.format(n=1000),
    )
