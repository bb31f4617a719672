"""Keyword backend pg_textsearch

kb.keyword_search hands BM25 with its default parameters to kb.keyword_search_pg_textsearch
when kb.keyword_backend says so (the session's pgkb.keyword_backend: auto, sql or
pg_textsearch, and whether the database has the pg_textsearch extension and each collection's
bm25 index). The indexes are partial, one per collection (kb.keyword_index_name), created by
kb.build_keyword_indexes (pgkb db upgrade, after it creates the extension) and by a trigger on
kb.collections for a new collection (dropped with a removed one). Without the extension nothing
changes: the SQL BM25 serves.

Revision ID: 0026
Revises: 0025
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0026.sql
FUNCTIONS = (
    "build_keyword_indexes",
    "collections_keyword_index",
    "keyword_backend",
    "keyword_backend_status",
    "keyword_index_name",
    "keyword_search",
    "keyword_search_pg_textsearch",
)


TRIGGER_UP = """
CREATE TRIGGER collections_keyword_index AFTER INSERT OR DELETE ON kb.collections
    FOR EACH ROW EXECUTE FUNCTION kb.collections_keyword_index();
"""

# the bm25 indexes go with the functions that use them
TRIGGER_DOWN = """
DROP TRIGGER IF EXISTS collections_keyword_index ON kb.collections;
DO $$
DECLARE
    i text;
BEGIN
    FOR i IN SELECT c.relname FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'kb'::pg_catalog.regnamespace AND c.relkind = 'i'
                AND c.relname LIKE 'chunks\\_bm25\\_%'
    LOOP
        EXECUTE format('DROP INDEX kb.%I', i);
    END LOOP;
END
$$;
"""


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    op.execute(TRIGGER_UP)


def downgrade() -> None:
    op.execute(TRIGGER_DOWN)
    downgrade_functions(op, __file__, revision, FUNCTIONS)
