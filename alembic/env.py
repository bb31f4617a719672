"""Alembic environment for pgkb.

The database comes, in order, from an injected SQLAlchemy connection
(``config.attributes["connection"]``), an explicit URL (``config.attributes["url"]``), or pgkb's
one settings object (``PGKB_DATABASE_URL`` / config file / the embedded default server). The
version table lives in the ``kb`` schema, so pgkb can share a database with other applications
(and their own Alembic history).
"""

from __future__ import annotations

from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from loader.db.connect import SCHEMA, VERSION_TABLE, database_url, sqlalchemy_url
from loader.settings import load_settings

config = context.config
if config.config_file_name is not None and not config.attributes.get("connection"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _configure_and_run(connection: sa.engine.Connection) -> None:
    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    injected = config.attributes.get("connection")
    if injected is not None:
        _configure_and_run(injected)
        return
    url = config.attributes.get("url")
    if url is None:
        settings = config.attributes.get("settings") or load_settings()
        url = database_url(settings)
    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        _configure_and_run(connection)
        connection.commit()


if context.is_offline_mode():
    raise SystemExit(
        "pgkb migrations need a live database (offline SQL generation is not supported)"
    )
run_migrations_online()
