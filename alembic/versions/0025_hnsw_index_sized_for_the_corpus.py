"""HNSW index sized for the corpus

A model's HNSW index takes its parameters from the number of the model's embeddings when it is
built (kb.hnsw_parameters: m 16 / ef_construction 64 / ef_search 200 below 250,000 embeddings,
m 32 / 128 / 800 from 250,000), unless they are given explicitly; kb.vector_indexes records what
each index was built with, and kb.vector_search searches it at its recorded ef_search.
kb.resize_model_index builds an index again when its corpus crossed a tier (pgkb db reindex,
pgkb models activate). The existing indexes are recorded as they are (ef_search 200, today's
default; sized_by 'corpus' when built with 16 / 64, the old defaults, else 'setting').

Revision ID: 0025
Revises: 0024
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0025.sql
FUNCTIONS = (
    "build_model_index",
    "drop_model_index",
    "hnsw_ef_search",
    "hnsw_parameters",
    "resize_model_index",
    "vector_index_status",
    "vector_search",
)


SCHEMA_UP = """
CREATE TABLE kb.vector_indexes (
    model_id        integer     PRIMARY KEY REFERENCES kb.embedding_models (id) ON DELETE CASCADE,
    index_name      text        NOT NULL,
    m               integer     NOT NULL CHECK (m BETWEEN 2 AND 100),
    ef_construction integer     NOT NULL CHECK (ef_construction BETWEEN 4 AND 1000),
    ef_search       integer     NOT NULL CHECK (ef_search BETWEEN 1 AND 1000),
    embedding_count bigint      NOT NULL CHECK (embedding_count >= 0),
    sized_by        text        NOT NULL CHECK (sized_by IN ('corpus', 'setting')),
    built_at        timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.vector_indexes IS 'What each model''s HNSW index was built with (m, ef_construction), the ef_search kb.vector_search uses for it, the model''s embeddings at that moment, and whether the parameters were sized from that count (corpus, kb.hnsw_parameters) or given (setting). Written by kb.build_model_index.';

INSERT INTO kb.vector_indexes (model_id, index_name, m, ef_construction, ef_search,
                               embedding_count, sized_by)
SELECT em.id, i.relname, o.m, o.ef_construction, 200,
       (SELECT count(*) FROM kb.embeddings e WHERE e.model_id = em.id),
       CASE WHEN (o.m, o.ef_construction) = (16, 64) THEN 'corpus' ELSE 'setting' END
  FROM kb.embedding_models em
  JOIN pg_catalog.pg_class i ON i.relname = 'embeddings_hnsw_model_' || em.id
                            AND i.relnamespace = 'kb'::pg_catalog.regnamespace
 CROSS JOIN LATERAL (
     SELECT coalesce(max(split_part(r, '=', 2)::integer) FILTER (WHERE split_part(r, '=', 1) = 'm'), 16) AS m,
            coalesce(max(split_part(r, '=', 2)::integer)
                         FILTER (WHERE split_part(r, '=', 1) = 'ef_construction'), 64) AS ef_construction
       FROM unnest(coalesce(i.reloptions, '{}'::text[])) AS r) o;
"""  # noqa: E501

SCHEMA_DOWN = "DROP TABLE kb.vector_indexes"


def upgrade() -> None:
    op.execute(SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    op.execute(SCHEMA_DOWN)
