"""A connection to the configured database whose ``kb`` schema is at this pgkb's head."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from loader.db.connect import connect, database_url, register_vector
from loader.db.migrations import check_schema
from loader.settings import Settings


@contextmanager
def connection(
    settings: Settings, *, check: bool = True, read: bool = False
) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the configured database whose ``kb`` schema is at head.

    ``read=True``: the caller only reads, so the connection goes to ``read_database_url`` when
    it is set (a hot standby); every other connection goes to the primary (``database_url``)."""
    url = database_url(settings, read=read)
    conn = connect(url, register=False)
    try:
        if check:
            check_schema(conn)
        register_vector(conn)
        yield conn
    finally:
        conn.close()
