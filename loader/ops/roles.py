"""Roles for services: ``pgkb db grant ROLE --read|--write``.

``--read`` makes ROLE a member of ``kb_reader`` (EXECUTE on the search, graph and read
functions; no table privilege) and sets, for ROLE in this database only, a ``search_path`` that
lets it call ``hybrid_search(...)`` unqualified and (``--statement-timeout``) a statement timeout.
``--write`` makes ROLE a member of ``kb_writer`` (what the loader needs: the kb tables and the
maintenance functions). The settings take effect at ROLE's next login.
"""

from __future__ import annotations

from typing import Any

import psycopg

from loader.db import queries
from loader.errors import PgkbError


def grant(
    conn: psycopg.Connection[Any],
    role: str,
    *,
    read: bool,
    write: bool,
    statement_timeout: str | None = None,
) -> list[str]:
    """Grant ROLE read and/or write access; returns the statements run (for the report)."""
    import psycopg
    from psycopg import sql

    if not read and not write:
        raise PgkbError("say what to grant", hint="--read (search) or --write (load)")
    row = conn.execute(queries.ROLE_CAN_LOGIN, (role,)).fetchone()
    conn.rollback()
    if row is None:
        raise PgkbError(
            f"role {role!r} does not exist; nothing was granted",
            hint=f"create it first: CREATE ROLE \"{role}\" LOGIN PASSWORD '...'",
        )
    if role in ("kb_reader", "kb_writer"):
        raise PgkbError(f"{role} is one of pgkb's own group roles; grant it to a service role")
    if statement_timeout is not None:
        try:
            conn.execute(queries.CHECK_STATEMENT_TIMEOUT, (statement_timeout,))
        except (psycopg.errors.InvalidParameterValue, psycopg.errors.DataException):
            conn.rollback()
            raise PgkbError(
                f"--statement-timeout {statement_timeout!r} is not a valid timeout; nothing was "
                "granted",
                hint="use e.g. 5s, 500ms, 2min",
            ) from None
        conn.rollback()
    current = conn.execute(queries.CURRENT_DATABASE).fetchone()
    assert current is not None
    database = current[0]
    vector_schema = conn.execute(queries.VECTOR_SCHEMA).fetchone()
    conn.rollback()
    path = ["kb"] + ([vector_schema[0]] if vector_schema and vector_schema[0] != "kb" else [])
    ident = sql.Identifier(role)
    db = sql.Identifier(database)
    statements: list[Any] = []
    if read:
        statements.append(queries.GRANT_READER.format(ident))
        statements.append(
            queries.ROLE_SEARCH_PATH.format(
                ident, db, sql.SQL(", ").join(sql.Identifier(s) for s in path)
            )
        )
        if statement_timeout is not None:
            statements.append(
                queries.ROLE_STATEMENT_TIMEOUT.format(ident, db, sql.Literal(statement_timeout))
            )
    if write:
        statements.append(queries.GRANT_WRITER.format(ident))
    done: list[str] = []
    try:
        with conn.transaction():
            for statement in statements:
                conn.execute(statement)
                done.append(statement.as_string(conn))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise PgkbError(
            f"not allowed to grant to {role!r}: {exc.diag.message_primary}; nothing was granted",
            hint="run pgkb db grant as the kb owner or a role with CREATEROLE",
        ) from None
    return done
