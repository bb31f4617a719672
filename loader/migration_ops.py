"""What the Alembic migrations use to apply the SQL functions of the function store.

The store, ``alembic/functions/``, holds one file per function per revision that changed it:
``alembic/functions/<name>/<revision>.sql`` is the whole text of ``kb.<name>`` as that revision
left it, and ``<revision>.dropped`` marks a revision that removed the function. Files are only
ever added (their SHA-256 are in ``alembic/functions/frozen.txt``). A migration names the
functions it changes, in the order it applies them (``FUNCTIONS``):

- ``upgrade_functions`` applies each one's file of that revision;
- ``downgrade_functions`` applies each one's newest file of an older revision, or drops the
  function when no older revision had it.

Revision ids sort in chain order (``0001``, ``0002``, ...), so "older" is a comparison of file
names. The store sits beside the migrations (``alembic/versions/`` and ``alembic/functions/``
share a parent), wherever pgkb is installed, so a migration finds it from its own path and never
reads ``sql_functions/``: replaying an old revision applies that revision's functions.

``replace_function`` makes ``CREATE OR REPLACE`` safe for signature changes: when PostgreSQL
refuses to replace in place (a new return type or parameter name) the old function is dropped
first, and when the new text adds an overload beside an older signature, the older one is
dropped, so a file always maps to exactly one function in the database.

This module is frozen like the migrations (its SHA-256 is in ``tests/sql/test_migrations.py``):
replaying 0001 next year runs it as it is today.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection

SCHEMA = "kb"
DROPPED = ".dropped"  # the suffix of a store entry that removes its function


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


def store_dir(script: str) -> Path:
    """The function store of the migration at ``script`` (``<alembic>/versions/<file>.py``):
    ``<alembic>/functions``."""
    return Path(script).resolve().parent.parent / "functions"


def entry(store: Path, name: str, revision: str) -> Path:
    """The store file revision ``revision`` wrote for ``kb.<name>``."""
    for suffix in (".sql", DROPPED):
        path = store / name / f"{revision}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"the function store has no {name}/{revision}.sql (nor {revision}{DROPPED}) in {store}: "
        "the migration names a function its revision did not store"
    )


def previous_entry(store: Path, name: str, revision: str) -> Path | None:
    """The newest store file of ``kb.<name>`` written by a revision older than ``revision``, or
    None when no older revision had the function."""
    folder = store / name
    if not folder.is_dir():
        return None
    older = [
        path
        for path in folder.iterdir()
        if path.suffix in (".sql", DROPPED) and path.stem < revision
    ]
    return max(older, key=lambda path: path.stem, default=None)


def _apply(conn: Connection, name: str, path: Path | None) -> None:
    if path is None or path.suffix == DROPPED:
        drop_function(conn, name)
    else:
        replace_function(conn, name, path.read_bytes().decode("utf-8"))


def upgrade_functions(op: Any, script: str, revision: str, names: Sequence[str]) -> None:
    """Apply revision ``revision``'s store file of each function of ``names``, in order."""
    conn = op.get_bind()
    store = store_dir(script)
    for name in names:
        _apply(conn, name, entry(store, name, revision))


def downgrade_functions(op: Any, script: str, revision: str, names: Sequence[str]) -> None:
    """Undo revision ``revision``'s functions: each one's newest older store file, in order
    (a function no older revision had is dropped)."""
    conn = op.get_bind()
    store = store_dir(script)
    for name in names:
        _apply(conn, name, previous_entry(store, name, revision))
