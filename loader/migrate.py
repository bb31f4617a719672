"""Run the Alembic migrations that create and change the ``kb`` schema."""

from __future__ import annotations

from typing import Any

import psycopg
from alembic.config import Config

from loader import resources
from loader.db import check_schema, connect, current_revision, known_revisions, redact
from loader.errors import DatabaseError
from loader.settings import Settings


def alembic_config(settings: Settings | None = None, url: str | None = None) -> Config:
    """An Alembic config pointing at pgkb's scripts wherever pgkb is installed."""
    config = Config(str(resources.alembic_ini()))
    config.set_main_option("script_location", str(resources.alembic_dir()))
    if settings is not None:
        config.attributes["settings"] = settings
    if url is not None:
        config.attributes["url"] = url
    return config


def _preflight(url: str) -> None:
    conn = connect(url, register=False)
    try:
        row = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
        if row is None:
            version = conn.execute("SHOW server_version").fetchone()
            raise DatabaseError(
                f"the server at {redact(url)} (PostgreSQL {version[0] if version else '?'}) "
                "has no pgvector extension available",
                hint="install pgvector on that server "
                "(https://github.com/pgvector/pgvector#installation) "
                "or unset PGKB_DATABASE_URL to use pgkb's embedded server, which has it",
            )
        revision = current_revision(conn)
        if revision is not None and revision not in known_revisions():
            check_schema(conn)  # raises the "made by a newer pgkb" error
    finally:
        conn.close()


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    _preflight(url)
    try:
        command.upgrade(alembic_config(url=url), revision)
    except psycopg.Error as exc:
        raise DatabaseError(f"migration failed on {redact(url)}: {exc}") from exc


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url=url), revision)


def upgrade_connection(connection: Any, revision: str = "head") -> None:
    """Migrate through an existing SQLAlchemy connection (tests inject theirs this way)."""
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)
