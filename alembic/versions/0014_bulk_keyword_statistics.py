"""bulk keyword statistics: kb.rebuild_keyword_stats and the trigger's bulk path

kb.rebuild_keyword_stats() (new, SECURITY DEFINER, EXECUTE for kb_writer) recomputes
kb.term_stats, kb.corpus_stats and kb.term_postings from kb.chunks set-wise, the postings'
primary key dropped during the insert and built once. kb.chunks_maintain_stats (the statistics
trigger) calls it for an INSERT statement of at least 10,000 rows that at least doubles the
corpus, and does nothing while pgkb.defer_keyword_stats = 'on' (a loader writing through several
connections, which then calls the rebuild). kb.term_impacts reads length(tsv) once per call
instead of once per lexeme (the same values; each read detoasted the whole tsvector).

Revision ID: 0014
Revises: 0013
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0014.sql
FUNCTIONS = (
    "chunks_maintain_stats",
    "rebuild_keyword_stats",
    "term_impacts",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
