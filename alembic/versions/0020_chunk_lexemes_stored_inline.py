"""Each chunk's lexemes (kb.chunks.tsv) are kept in the chunk's row, not in the TOAST table.

The keyword leg reads the tsvector of up to a thousand candidate chunks per query. Under the
default storage (EXTENDED), a row over about 2 kB had its tsvector moved out of line (uncompressed:
pglz rarely shrinks a tsvector enough), so reading it cost a TOAST index lookup and more pages:
in the 1M-chunk benchmark corpus, 17% of the chunks. With STORAGE MAIN the tsvector stays in
the row (moved out only when the row could not fit a page), and a long chunk's content is moved
out instead, which a search reads only for the rows it returns and for identifier queries.
Measured on two copies of that corpus rewritten by VACUUM FULL, one under each storage, best of
three per query, alternating: the keyword leg's p50 / p95 over 441 plain questions 23.2 / 31.0
-> 18.3 / 28.5 ms; over the 59 identifier questions (whose candidates' content is read)
27.7 / 41.1 -> 25.7 / 41.0 ms.

ALTER ... SET STORAGE changes how rows are written from now on; rows already stored move when
they are rewritten (a re-ingest, or VACUUM FULL kb.chunks by the owner: see the scaling guide).
Nothing else changes: the same values, the same indexes.

Revision ID: 0020
Revises: 0019
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE kb.chunks ALTER COLUMN tsv SET STORAGE MAIN")


def downgrade() -> None:
    op.execute("ALTER TABLE kb.chunks ALTER COLUMN tsv SET STORAGE EXTENDED")
