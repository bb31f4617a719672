"""Connections to the knowledge base and its schema's state.

``database_url`` picks the database (``PGKB_DATABASE_URL`` or the embedded default), ``connect``
opens a psycopg connection with pgvector's types registered, and ``check_schema`` refuses to work
on a database whose ``kb`` schema is missing, behind, or made by a newer pgkb, with a message
that says what to run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from loader.errors import DatabaseError
from loader.settings import Settings

SCHEMA = "kb"
VERSION_TABLE = "alembic_version"


def redact(url: str) -> str:
    """``url`` (or a DSN, or a message quoting one) with every password replaced by ``***``."""
    from loader.safety import redact as redact_secrets

    return redact_secrets(url)


def database_url(settings: Settings) -> str:
    """The URL in use: ``settings.database_url``, else the embedded server (started if needed)."""
    if settings.database_url:
        return settings.database_url
    from loader.embedded import ensure_server

    return ensure_server(settings.pgdata)


def sqlalchemy_url(url: str) -> str:
    """The same URL for SQLAlchemy's psycopg 3 dialect (``postgresql+psycopg://``)."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg://", url)


def connect(
    url: str, *, autocommit: bool = False, register: bool = True
) -> psycopg.Connection[Any]:
    """Open a connection, translating failures into an actionable :class:`DatabaseError`."""
    try:
        conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseError(
            f"cannot connect to the database {redact(url)}: {detail}",
            hint="check PGKB_DATABASE_URL (or unset it to use the embedded server) "
            "and that the server is running",
        ) from None
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(
            f"invalid database URL {redact(url)}: {exc}",
            hint="use the form postgresql://user:password@host:5432/dbname",
        ) from None
    if register:
        try:
            register_vector(conn)
        except Exception:
            conn.close()
            raise
    return conn


def register_vector(conn: psycopg.Connection[Any]) -> None:
    """Register pgvector's types, with a clear error when the extension is missing."""
    from pgvector.psycopg import register_vector as _register

    try:
        _register(conn)
    except psycopg.ProgrammingError:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        raise DatabaseError(
            "the database has no pgvector extension (type vector not found)",
            hint="run `pgkb db upgrade`, which creates it; the server must have pgvector installed",
        ) from None


@contextmanager
def connection(settings: Settings, *, check: bool = True) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the configured database whose ``kb`` schema is at head."""
    url = database_url(settings)
    conn = connect(url, register=False)
    try:
        if check:
            check_schema(conn)
        register_vector(conn)
        yield conn
    finally:
        conn.close()


def current_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The Alembic revision of the ``kb`` schema, or None when it was never migrated."""
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.{VERSION_TABLE}",)
    ).fetchone()
    if not exists or not exists[0]:
        conn.rollback()
        return None
    row = conn.execute(f"SELECT version_num FROM {SCHEMA}.{VERSION_TABLE}").fetchone()
    conn.rollback()
    return None if row is None else str(row[0])


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    from loader.migrate import alembic_config

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise DatabaseError(f"this pgkb has {len(heads)} migration heads; reinstall pgkb")
    return str(heads[0])


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    from loader.migrate import alembic_config

    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def check_schema(conn: psycopg.Connection[Any]) -> str:
    """Raise :class:`DatabaseError` unless the ``kb`` schema is at this pgkb's head revision."""
    revision = current_revision(conn)
    head = head_revision()
    if revision is None:
        raise DatabaseError(
            "the database has no pgkb schema yet",
            hint="run `pgkb db upgrade` to create it",
        )
    if revision == head:
        return revision
    if revision not in known_revisions():
        raise DatabaseError(
            f"the kb schema is at revision {revision}, which this pgkb (head {head}) "
            "does not know: it was made by a newer pgkb",
            hint="upgrade pgkb (pip install -U pgkb) before using this database",
        )
    raise DatabaseError(
        f"the kb schema is at revision {revision}, behind this pgkb's {head}",
        hint="run `pgkb db upgrade`",
    )
