"""faster keyword statistics rebuild: impacts computed set-wise, postings keyed in C collation

kb.rebuild_keyword_stats() computes kb.term_impacts' expression set-wise instead of calling the
function once per chunk (the same values; 9.2 -> 2.6 CPU-seconds for the 3 million postings of a
100k-chunk corpus), kb.term_impacts computes its length term once per call, and
kb.term_postings.lexeme is compared in the "C" collation (byte order: its primary key's sorted
build is about 30% cheaper than under the database's libc collation; equality, the only
comparison kb.keyword_search makes on it, is unchanged).

Revision ID: 0019
Revises: 0018
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0019.sql
FUNCTIONS = (
    "rebuild_keyword_stats",
    "term_impacts",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    op.execute('ALTER TABLE kb.term_postings ALTER COLUMN lexeme TYPE text COLLATE "C"')


def downgrade() -> None:
    op.execute('ALTER TABLE kb.term_postings ALTER COLUMN lexeme TYPE text COLLATE "default"')
    downgrade_functions(op, __file__, revision, FUNCTIONS)
