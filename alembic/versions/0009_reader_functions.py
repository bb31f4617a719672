"""reader roles read through SECURITY DEFINER functions: the schema revision, the active model,
stats, the document catalogue and the abstention gate (no table privilege needed)

Revision ID: 0009
Revises: 0008
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0009.sql
FUNCTIONS = (
    "abstention_rule",
    "active_model",
    "chunk_details",
    "chunk_lexemes",
    "document_list",
    "find_documents",
    "name_found",
    "near_lexemes",
    "schema_version",
    "show_document",
    "squashed_lexeme_found",
    "stats",
    "word_lexemes",
)


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    # CREATE OR REPLACE keeps a function's privileges: give back what 0008 granted
    op.execute("GRANT EXECUTE ON FUNCTION kb.active_model() TO PUBLIC")
    op.execute(
        """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        REVOKE EXECUTE ON FUNCTION kb.stats(integer) FROM kb_reader;
    END IF;
END
$$;
"""
    )
