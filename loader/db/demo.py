"""The quickstart's demo database: the sample corpus lives apart from the user's knowledge base.

``pgkb quickstart`` ingests the bundled sample into a database of its own on the same server,
named after the configured one with ``_demo`` appended (``pgkb_demo`` on the embedded server),
so a later ``pgkb ingest ~/notes`` never mixes one's documents with the sample's pages.
``pgkb quickstart --remove`` drops it, and only it.
"""

from __future__ import annotations

import urllib.parse

import psycopg
from psycopg import sql

from loader.db import queries
from loader.db.connect import connect, redact
from loader.errors import DatabaseError

DEMO_SUFFIX = "_demo"


def _database_name(url: str) -> str:
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(
            f"invalid database URL {redact(url)}: {exc}",
            hint="use the form postgresql://user:password@host:5432/dbname",
        ) from None
    return str(params.get("dbname") or params.get("user") or "postgres")


def demo_database_name(url: str) -> str:
    """The demo database's name for the knowledge base at ``url``: its name + ``_demo``."""
    return _database_name(url) + DEMO_SUFFIX


def demo_url(url: str) -> str:
    """``url`` with its database replaced by the demo database (same server, same user)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql") and not parts.scheme.startswith(
        "postgresql+"
    ):
        raise DatabaseError(
            f"cannot derive a demo database from {redact(url)}: it is not a postgresql:// URL",
            hint="give the database for the sample explicitly: pgkb quickstart --demo-url URL",
        )
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query = [(k, v) for k, v in query if k != "dbname"]
    path = "/" + urllib.parse.quote(demo_database_name(url), safe="")
    return urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc, path, urllib.parse.urlencode(query, safe="/"), parts.fragment)
    )


def _same_database(a: str, b: str) -> bool:
    da, db = psycopg.conninfo.conninfo_to_dict(a), psycopg.conninfo.conninfo_to_dict(b)
    keys = ("host", "hostaddr", "port", "dbname")
    return all(da.get(k) == db.get(k) for k in keys)


def create_demo_database(url: str) -> str:
    """Create (unless it exists) the demo database beside the one at ``url``; its URL."""
    target = demo_url(url)
    name = demo_database_name(url)
    with connect(url, autocommit=True, register=False) as conn:
        if conn.execute(queries.DATABASE_EXISTS, (name,)).fetchone():
            return target
        try:
            conn.execute(queries.CREATE_DATABASE.format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            raise DatabaseError(
                f"cannot create the demo database {name} on {redact(url)}: permission denied",
                hint="the sample is kept out of your knowledge base in a database of its own: "
                "grant CREATEDB to this role, or create a database and pass its URL with "
                "pgkb quickstart --demo-url URL",
            ) from None
        except psycopg.errors.DuplicateDatabase:
            pass
    return target


def drop_demo_database(url: str, demo: str | None = None) -> str | None:
    """Drop the demo database of the knowledge base at ``url`` (or the one at ``demo``).

    Returns the dropped database's name, None when there was none. Refuses to drop the
    configured knowledge base itself."""
    target = demo or demo_url(url)
    if _same_database(target, url):
        raise DatabaseError(
            "the demo database is the configured knowledge base itself; nothing was dropped",
            hint="--demo-url must name the database the quickstart used, not PGKB_DATABASE_URL",
        )
    name = _database_name(target)
    with connect(url, autocommit=True, register=False) as conn:
        current = conn.execute(queries.CURRENT_DATABASE).fetchone()
        if current is not None and current[0] == name:
            raise DatabaseError(
                f"refusing to drop {name}: it is the configured knowledge base",
                hint="--demo-url must name the database the quickstart used",
            )
        if not conn.execute(queries.DATABASE_EXISTS, (name,)).fetchone():
            return None
        conn.execute(queries.DROP_DATABASE.format(sql.Identifier(name)))
    return name
