"""Harden the SQL functions (issue 12, defects 2 and 3).

Every kb function now runs with ``search_path = pg_catalog, pg_temp``: a role that may create
objects in schema ``public`` can no longer plant an exact-type overload (``public.unnest(text[])``)
that a SECURITY DEFINER function would call as its owner. pgvector's type, functions and operators
are named by schema (``public.vector``, ``public.vector_dims``, ``OPERATOR(public.<=>)``,
``public.vector_cosine_ops``): migration 0001 creates the extension with ``CREATE EXTENSION IF
NOT EXISTS vector``, which puts it in ``public``, and the functions before this revision found it
there through their search_path. ``upgrade`` checks that, and stops with instructions when the
extension lives in another schema. The retrieval functions also clamp their arguments to the
maxima stated in their comments (bounded work for kb_reader).

Revision ID: 0003
Revises: 0002
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0003.sql
FUNCTIONS = (
    "activate_model",
    "active_model",
    "chunks_maintain_stats",
    "embeddings_check_dims",
    "hybrid_search",
    "keyword_search",
    "merge_neighbors",
    "neighbor_chunks",
    "query_terms",
    "read_document",
    "register_model",
    "search_filters",
    "search_query",
    "vector_search",
)


def upgrade() -> None:
    schema = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
        )
        .scalar()
    )
    if schema is not None and schema != "public":
        raise RuntimeError(
            f"the pgvector extension is installed in schema {schema!r}, but pgkb's functions "
            "name its type and operators as public.vector: move it with "
            "ALTER EXTENSION vector SET SCHEMA public; then run the upgrade again"
        )
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
