"""Operations the Alembic migrations use to (re)create the SQL functions they carry.

A migration embeds the full text of every function it creates or changes (``FUNCTIONS``) and the
text each replaced (``PREVIOUS``, for downgrade), so replaying an old revision applies that
revision's functions, never today's files in ``sql_functions/``.

``replace_function`` makes ``CREATE OR REPLACE`` safe for signature changes: when PostgreSQL
refuses to replace in place (a new return type or parameter name) the old function is dropped
first, and when the new text adds an overload beside an older signature, the older one is
dropped, so a file always maps to exactly one function in the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection

SCHEMA = "kb"


def run_sql(conn: Connection, text: str) -> None:
    """Execute ``text`` (one or more statements) as written, through the driver's own connection:
    no bind-parameter parsing, so ``%`` and ``:name`` in function bodies stay as they are."""
    driver = conn.connection.driver_connection
    assert driver is not None
    driver.execute(text.encode("utf-8"))


def _oids(conn: Connection, name: str) -> set[int]:
    rows = conn.execute(
        sa.text(
            "SELECT p.oid FROM pg_proc p WHERE p.pronamespace = CAST(:schema AS regnamespace) "
            "AND p.proname = :name"
        ),
        {"schema": SCHEMA, "name": name},
    )
    return {int(r[0]) for r in rows}


def _drop_oids(conn: Connection, oids: set[int]) -> None:
    for oid in sorted(oids):
        ident = conn.execute(
            sa.text("SELECT CAST(CAST(:oid AS oid) AS regprocedure)::text"), {"oid": oid}
        ).scalar_one()
        run_sql(conn, f"DROP FUNCTION IF EXISTS {ident}")  # ident comes from regprocedure


def replace_function(conn: Connection, name: str, text: str) -> None:
    """Create or replace function ``kb.<name>`` from ``text`` (its whole file)."""
    before = _oids(conn, name)
    run_sql(conn, "SET LOCAL check_function_bodies = off")
    try:
        with conn.begin_nested():
            run_sql(conn, text)
    except psycopg.errors.InvalidFunctionDefinition:
        # a new return type or parameter name: CREATE OR REPLACE cannot change it in place
        _drop_oids(conn, before)
        run_sql(conn, text)
        before = set()
    after = _oids(conn, name)
    if after - before:  # the text created a new signature: the older ones are stale overloads
        _drop_oids(conn, before)
    run_sql(conn, "SET LOCAL check_function_bodies = on")


def drop_function(conn: Connection, name: str) -> None:
    _drop_oids(conn, _oids(conn, name))


def apply_functions(op: Any, functions: Mapping[str, str | None]) -> None:
    """Apply a migration's ``FUNCTIONS`` (None = the function was removed)."""
    conn = op.get_bind()
    for name, text in functions.items():
        if text is None:
            drop_function(conn, name)
        else:
            replace_function(conn, name, text)


def revert_functions(op: Any, previous: Mapping[str, str | None]) -> None:
    """Undo a migration's functions from its ``PREVIOUS`` (None = did not exist before)."""
    apply_functions(op, previous)
