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
