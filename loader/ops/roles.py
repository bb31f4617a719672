"""Roles for services: ``pgkb db grant ROLE --read|--write``, ``pgkb db grants``,
``pgkb db revoke ROLE``.

``--read`` makes ROLE a member of ``kb_reader`` (EXECUTE on the search, graph and read
functions; no table privilege), records which collections it may read in
``kb.collection_grants`` (``--collection``, repeatable; none: every collection), and sets, for
ROLE in this database only, a ``search_path`` that lets it call ``hybrid_search(...)``
unqualified and (``--statement-timeout``) a statement timeout. ``--write`` makes ROLE a member
of ``kb_writer`` (what the loader needs: the kb tables and the maintenance functions; writers
read every collection). The settings take effect at ROLE's next login; the collections at its
next call (the kb functions read the grants on every call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from loader.db import queries
from loader.db.embedded import role_url
from loader.errors import PgkbError
from loader.filters import check_collection


def grant(
    conn: psycopg.Connection[Any],
    role: str,
    *,
    read: bool,
    write: bool,
    statement_timeout: str | None = None,
    collections: Sequence[str] = (),
) -> list[str]:
    """Grant ROLE read and/or write access; returns the statements run (for the report).

    With ``collections``: reading those collections only (``read``), or reading and writing
    them (``write``: submitting and removing documents with kb.submit_document,
    kb.submit_file, kb.remove_document, which check the grant; the role gets kb_reader, never
    the tables). ``write`` without collections makes ROLE a loader (kb_writer): every collection,
    the tables, the maintenance functions."""
    if not read and not write:
        raise PgkbError("say what to grant", hint="--read (search) or --write (load)")
    names = list(dict.fromkeys(check_collection(c) for c in collections))
    if names:
        missing = [r[0] for r in conn.execute(queries.MISSING_COLLECTIONS, (names,)).fetchall()]
        conn.rollback()
        if missing:
            raise PgkbError(
                f"no collection {', '.join(repr(m) for m in missing)}; nothing was granted",
                hint="pgkb collections lists them; pgkb ingest DIR --collection NAME or "
                "pgkb collections create NAME makes one",
            )
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
    scoped_writer = write and bool(names)
    if scoped_writer:  # a writer of some collections reads them too, through the functions
        read, write = True, False
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
            if read:
                targets: list[str | None] = [*names] or [None]  # None: every collection
                verb = "reads and writes" if scoped_writer else "reads"
                for name in targets:
                    conn.execute(queries.INSERT_COLLECTION_GRANT, (role, name, scoped_writer))
                    done.append(
                        f"-- {role} {verb} "
                        + (f"collection {name}" if name else "every collection")
                    )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise PgkbError(
            f"not allowed to grant to {role!r}: {exc.diag.message_primary}; nothing was granted",
            hint="run pgkb db grant as the kb owner or a role with CREATEROLE",
        ) from None
    return done


def embedded_sign_in(conn: psycopg.Connection[Any], role: str) -> str:
    """How ``role`` signs in to the embedded server (``conn`` is the owner's): with its
    password, as every role there does; a warning instead when it has none."""
    url = role_url(conn.info.get_parameters(), role)
    row = conn.execute(queries.ROLE_HAS_PASSWORD, (role,)).fetchone()
    conn.rollback()
    if row is not None and not row[0]:
        return (
            f"warning: {role} has no password, and every role signs in to the embedded server "
            f"with its password: give it one (ALTER ROLE \"{role}\" PASSWORD '...'); it then "
            f"connects as {url}"
        )
    return f"{role} signs in with its password (the embedded server checks it): {url}"


def grants(conn: psycopg.Connection[Any], role: str | None = None) -> list[dict[str, Any]]:
    """The collection grants (of ``role``, or every role's), by role: ``collection`` None means
    every collection; ``role_exists`` and ``reader`` (a member of kb_reader) say whether the
    grant is in effect."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(queries.COLLECTION_GRANTS, {"role": role}).fetchall()
    conn.rollback()
    return [dict(r) for r in rows]


def revoke(conn: psycopg.Connection[Any], role: str, collections: Sequence[str] = ()) -> list[str]:
    """Take collections from ROLE (``collections``), or (none given) its reading altogether:
    every grant, and its membership in kb_reader. Returns what was done (for the report)."""
    if role in ("kb_reader", "kb_writer"):
        raise PgkbError(f"{role} is one of pgkb's own group roles; revoke from a service role")
    names = list(dict.fromkeys(check_collection(c) for c in collections))
    held = grants(conn, role)
    if names and any(g["collection"] is None for g in held):
        raise PgkbError(
            f"{role} reads every collection (granted without --collection); nothing was revoked",
            hint=f"pgkb db revoke {role}, then pgkb db grant {role} --read --collection NAME "
            "for each collection it keeps",
        )
    absent = [n for n in names if n not in {g["collection"] for g in held}]
    if absent:
        raise PgkbError(
            f"{role} has no grant of {', '.join(repr(a) for a in absent)}; nothing was revoked",
            hint="pgkb db grants lists the grants",
        )
    done: list[str] = []
    try:
        with conn.transaction():
            rows = conn.execute(
                queries.DELETE_COLLECTION_GRANTS, {"role": role, "collections": names or None}
            ).fetchall()
            done += [
                f"-- {role} no longer reads "
                + (f"collection {r[0]}" if r[0] else "every collection")
                for r in rows
            ]
            exists = conn.execute(queries.ROLE_CAN_LOGIN, (role,)).fetchone() is not None
            if not names and exists:
                statement = queries.REVOKE_READER.format(sql.Identifier(role))
                conn.execute(statement)
                done.append(statement.as_string(conn))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise PgkbError(
            f"not allowed to revoke from {role!r}: {exc.diag.message_primary}; nothing was revoked",
            hint="run pgkb db revoke as the kb owner or a role with CREATEROLE",
        ) from None
    if not done:
        raise PgkbError(f"{role} has no grant to revoke", hint="pgkb db grants lists the grants")
    return done
