"""Reaching the database: which URL, and a psycopg connection with pgvector's types.

``database_url`` picks the database (``PGKB_DATABASE_URL`` or the embedded default; for reads,
``PGKB_READ_DATABASE_URL`` when set), ``connect``
opens a psycopg connection with pgvector's types registered. ``SCHEMA`` is the one name of pgkb's
schema on the Python side (the frozen ``loader.migration_ops`` keeps its own copy, see
``sql_functions/README.md``).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import psycopg

from loader.db import queries
from loader.db.embedded import ensure_server
from loader.errors import DatabaseError
from loader.safety import redact as redact_secrets
from loader.settings import Settings

SCHEMA = "kb"
VERSION_TABLE = "alembic_version"


def redact(url: str) -> str:
    """``url`` (or a DSN, or a message quoting one) with every password replaced by ``***``."""
    return redact_secrets(url)


def database_url(settings: Settings, *, read: bool = False) -> str:
    """The URL in use: ``settings.database_url``, else the embedded server (started if needed).

    ``read=True`` (a connection that only reads) gives ``settings.read_database_url`` when it is
    set (a hot standby, say); writes never ask for it."""
    if read and settings.read_database_url:
        return settings.read_database_url
    if settings.database_url:
        return settings.database_url

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
            redact(f"cannot connect to the database {url}: {detail}"),
            hint="check PGKB_DATABASE_URL (or unset it to use the embedded server) "
            "and that the server is running",
        ) from None
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(
            # libpq quotes the string it could not parse: the whole message is redacted, the
            # URL last (a value with an unclosed quote is masked up to the end)
            redact(f"invalid database URL ({str(exc).strip()}): {url}"),
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


def privilege_error(exc: Exception, url: str | None = None) -> DatabaseError:
    """An ``InsufficientPrivilege`` error as one actionable message: what was denied (PostgreSQL's
    message, shown as it is), and the ``pgkb db grant`` that gives the rest. Which grant follows
    from what the role has, asked of the database at ``url`` (never read from the message): a
    member of kb_reader lacks ``--write``, a member of kb_writer lacks ``--read``, a member of
    both was denied what only the owner may do, and a role with neither (or when the database
    cannot say) is shown both grants."""
    diag = getattr(exc, "diag", None)
    message = (getattr(diag, "message_primary", None) or str(exc)).strip().splitlines()[0]
    role = "ROLE"
    if url:
        with contextlib.suppress(psycopg.ProgrammingError):
            role = str(psycopg.conninfo.conninfo_to_dict(url).get("user") or role)
    reader, writer = _memberships(url)
    grant = f"as the knowledge base's owner, run `pgkb db grant {role}"
    if reader and not writer:
        hint = f"{grant} --write` to let it load and maintain"
    elif writer and not reader:
        hint = f"{grant} --read` to let it search and read"
    elif reader and writer:
        hint = (
            f"{role} has both grants: this is for the knowledge base's owner only "
            "(e.g. `pgkb db upgrade`); run it as the owner"
        )
    else:
        hint = f"{grant} --read` to let it search and read, `--write` to load and maintain"
    return DatabaseError(
        f"{message} (the role {role} lacks a grant)",
        hint=f"{hint}; `pgkb db grant --help` lists what each grant allows",
    )


def _memberships(url: str | None) -> tuple[bool, bool]:
    """Whether the role of ``url`` is a member of kb_reader and of kb_writer (both False when
    the database cannot be asked)."""
    if not url:
        return False, False
    try:
        with connect(url, register=False) as conn:
            row = conn.execute(queries.KB_ROLE_MEMBERSHIPS).fetchone()
    except (DatabaseError, psycopg.Error):
        return False, False
    return (bool(row[0]), bool(row[1])) if row else (False, False)
