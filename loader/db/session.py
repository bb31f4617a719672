"""A connection to the configured database whose ``kb`` schema is at this pgkb's head."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from loader.db import queries
from loader.db.connect import connect, database_url, register_vector
from loader.db.migrations import check_schema
from loader.settings import Settings


@contextmanager
def connection(
    settings: Settings,
    *,
    check: bool = True,
    read: bool = False,
    collections: Sequence[str] | None = None,
) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the configured database whose ``kb`` schema is at head.

    ``read=True``: the caller only reads, so the connection goes to ``read_database_url`` when
    it is set (a hot standby); every other connection goes to the primary (``database_url``).
    ``collections``: the session's collections for this connection (None: the setting's)."""
    url = database_url(settings, read=read)
    conn = connect(url, register=False)
    try:
        scope_session(conn, settings, collections)
        if check:
            check_schema(conn)
        register_vector(conn)
        yield conn
    finally:
        conn.close()


def scope_session(
    conn: psycopg.Connection[Any],
    settings: Settings,
    collections: Sequence[str] | None = None,
) -> None:
    """Keep the connection to ``collections`` (None: the ``collections`` setting,
    ``--collection``): the session's ``pgkb.collections``, which every kb function applies
    within the role's grants; and give it the ``keyword_backend`` setting as
    ``pgkb.keyword_backend`` (kb.keyword_backend reads it)."""
    names = settings.collection_names() if collections is None else tuple(collections)
    if names:
        conn.execute(queries.SET_SESSION_COLLECTIONS, (",".join(names),))
    conn.execute(queries.SET_SESSION_KEYWORD_BACKEND, (settings.keyword_backend,))
    if not conn.autocommit:
        conn.commit()  # a session setting: rolled back with its transaction otherwise


def read_only_configurer(settings: Settings) -> Callable[[psycopg.Connection[Any]], None]:
    """How a server's pool prepares each new connection: autocommit, every transaction
    read-only, pgvector's types, the served collections (``--collection``) as the session's."""

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True
        conn.execute(queries.SESSION_READ_ONLY)
        conn.read_only = True
        scope_session(conn, settings)
        register_vector(conn)

    return configure


@contextmanager
def reader_connection(
    settings: Settings, *, collections: Sequence[str] | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """A connection that can only read: autocommit (no transaction stays open while a model
    thinks) and every transaction read-only, whatever a tool or a bug would send; kept to
    ``collections`` (None: the setting's)."""
    with connection(settings, read=True, collections=collections) as conn:
        conn.autocommit = True
        conn.execute(queries.SESSION_READ_ONLY)
        conn.read_only = True
        yield conn
