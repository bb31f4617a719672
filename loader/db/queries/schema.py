"""The schema's state and the active embedding model: what loader.db.migrations,
loader.db.status, loader.db.embedded (with its roles' passwords) and loader.providers.embeddings
ask the database."""

from __future__ import annotations

import dataclasses

from psycopg import sql

# --- schema state (loader.db.migrations, loader.db.status) ---------------------------------------

VERSION_TABLE_EXISTS = "SELECT to_regclass('kb.alembic_version') IS NOT NULL"
SCHEMA_REVISION = "SELECT version_num FROM kb.alembic_version"
SCHEMA_VERSION_CALLABLE = """
SELECT coalesce(has_function_privilege(p.oid, 'EXECUTE'), false)
  FROM (SELECT to_regprocedure('kb.schema_version()')::oid AS oid) AS p
"""
"""Can this role call ``kb.schema_version()`` (migration 0009; kb_reader has no table
privilege, so it cannot read ``kb.alembic_version`` itself)?"""
SCHEMA_VERSION = "SELECT kb.schema_version()"
PGVECTOR_AVAILABLE = "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
PGVECTOR_INSTALLED = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
SERVER_VERSION = "SHOW server_version"
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"
RELOAD_CONFIGURATION = "SELECT pg_reload_conf()"
"""The embedded server re-reads ``pg_hba.conf`` (its roles now sign in with their passwords)."""
ROLE_HAS_PASSWORD = "SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = %s"
"""Whether a role has a password (``pg_authid``: the embedded server's superuser may read it)."""
SET_ROLE_PASSWORD = sql.SQL("ALTER ROLE {} PASSWORD {}")
"""Format with ``sql.Identifier(role)`` and ``sql.Literal(scram_verifier)``: the password
hashed on the client, so the server never sees (or logs) it."""
CREATE_DATABASE = sql.SQL("CREATE DATABASE {}")
"""Format with ``sql.Identifier(name)``."""
DROP_DATABASE = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
"""Format with ``sql.Identifier(name)`` (``pgkb quickstart --remove``: the demo database only)."""
CURRENT_DATABASE = "SELECT current_database()"

KB_COUNTS = """
SELECT (SELECT count(*) FROM kb.documents) AS documents,
       (SELECT count(*) FROM kb.chunks) AS chunks,
       (SELECT count(*) FROM kb.embeddings) AS embeddings,
       (SELECT name || ' (' || dims || ' dims)' FROM kb.embedding_models WHERE is_active)
           AS active_model
"""


@dataclasses.dataclass(frozen=True)
class KbCounts:
    documents: int
    chunks: int
    embeddings: int
    active_model: str | None


# --- embedding models (loader.providers.embeddings) ----------------------------------------------

ACTIVE_MODEL = "SELECT id, name, dims, provider FROM kb.active_model()"
REGISTER_MODEL = "SELECT kb.register_model(%s, %s, %s, %s::jsonb, %s, %s)"
"""name, dims, provider, config (JSON text), hnsw_m, hnsw_ef_construction (NULL = sized from the
corpus)."""


@dataclasses.dataclass(frozen=True)
class ModelRow:
    id: int
    name: str
    dims: int
    provider: str
