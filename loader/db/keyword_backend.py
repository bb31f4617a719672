"""The keyword backend: pg_textsearch's bm25 index where the database has it, the SQL BM25
otherwise (``kb.keyword_backend`` decides per call; ``kb.keyword_backend_status`` says which
serves and why).

:func:`enable` is the step of ``pgkb db upgrade`` that gives a database the pg_textsearch backend
when the server can load it: ``CREATE EXTENSION pg_textsearch`` (a superuser's right: the
extension is not trusted) and each collection's bm25 index (``kb.build_keyword_indexes``, as the
owner). It never fails the upgrade: what it could not do is said in one line."""

from __future__ import annotations

from typing import Any

import psycopg

from loader.db import queries
from loader.db.connect import connect
from loader.settings import Settings


def status(conn: psycopg.Connection[Any], settings: Settings) -> dict[str, Any]:
    """``kb.keyword_backend_status()`` for a session with ``settings.keyword_backend``."""
    conn.execute(queries.SET_SESSION_KEYWORD_BACKEND, (settings.keyword_backend,))
    row = conn.execute(queries.KEYWORD_BACKEND_STATUS).fetchone()
    return dict(row[0]) if row is not None and row[0] is not None else {}


def describe(found: dict[str, Any]) -> str:
    """One line: the backend that serves, and why."""
    return f"{found.get('backend')} ({found.get('reason')})"


def enable(url: str, settings: Settings) -> str:
    """Create the pg_textsearch extension and the collections' bm25 indexes when the server can
    load it and the setting allows it; the one line saying which keyword backend serves now."""
    conn = connect(url, autocommit=True, register=False)
    try:
        found = status(conn, settings)
        if settings.keyword_backend == "sql":
            return describe(found)
        if found.get("installed") is None:
            if not found.get("available") or not found.get("loaded"):
                return describe(found)
            try:
                conn.execute(queries.CREATE_PG_TEXTSEARCH)
            except psycopg.errors.InsufficientPrivilege:
                return (
                    "sql (pg_textsearch is loaded by the server, but creating the extension "
                    "needs a superuser: run CREATE EXTENSION pg_textsearch as one, then pgkb db "
                    "upgrade again)"
                )
        try:
            conn.execute(queries.BUILD_KEYWORD_INDEXES)
        except psycopg.errors.InsufficientPrivilege as exc:
            detail = (exc.diag.message_primary if exc.diag else None) or str(exc)
            return f"sql (the bm25 indexes could not be built: {detail}; run as the kb owner)"
        return describe(status(conn, settings))
    finally:
        conn.close()
