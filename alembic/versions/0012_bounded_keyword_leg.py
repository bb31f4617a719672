"""bounded keyword leg: impact-ordered postings of common words

kb.term_postings holds, for every lexeme held by more than 1,000 chunks, its postings ordered by
impact (kb.term_impacts, the BM25 term-frequency part), kept current by the statistics trigger
and filled here for the chunks already stored; kb.keyword_search reads a common word's best
postings from it instead of all of them.

Revision ID: 0012
Revises: 0011
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0012.sql
FUNCTIONS = (
    "chunks_maintain_stats",
    "keyword_search",
    "term_impacts",
)


SCHEMA_UP = """
CREATE TABLE kb.term_postings (
    lexeme   text   NOT NULL,
    impact   real   NOT NULL,
    chunk_id bigint NOT NULL,
    PRIMARY KEY (lexeme, impact, chunk_id)
);
COMMENT ON TABLE kb.term_postings IS 'Impact-ordered postings of the lexemes held by more than 1000 chunks (impact: kb.term_impacts), kept current by the statistics trigger on kb.chunks; kb.keyword_search reads a common word''s best chunks from it.';
-- the statistics trigger runs as the writer (pgkb db grant --write), like kb.term_stats
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.term_postings TO kb_writer;
"""  # noqa: E501 (landed SQL, kept byte for byte)

FILL = """
INSERT INTO kb.term_postings (lexeme, impact, chunk_id)
SELECT i.lexeme, i.impact, c.id
  FROM kb.chunks c, kb.term_impacts(c.tsv) AS i, kb.term_stats t
 WHERE t.lexeme = i.lexeme AND t.df > 1000;
ANALYZE kb.term_postings;
"""

SCHEMA_DOWN = "DROP TABLE kb.term_postings;"


def upgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), FILL)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), SCHEMA_DOWN)
