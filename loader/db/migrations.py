"""The ``kb`` schema's revision: where it is, where it should be, and the Alembic runs that move it.

``check_schema`` refuses to work on a database whose ``kb`` schema is missing, behind, or made by a
newer pgkb, with a message that says what to run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import psycopg

from loader import resources
from loader.db import queries
from loader.db.connect import connect, redact
from loader.errors import DatabaseError
from loader.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config


def alembic_config(settings: Settings | None = None, url: str | None = None) -> Config:
    """An Alembic config pointing at pgkb's scripts wherever pgkb is installed."""
    from alembic.config import Config  # imported when needed: Alembic and SQLAlchemy take

    # seconds to import, and most commands only compare the schema's revision with the head
    config = Config(str(resources.alembic_ini()))
    config.set_main_option("script_location", str(resources.alembic_dir()))
    if settings is not None:
        config.attributes["settings"] = settings
    if url is not None:
        config.attributes["url"] = url
    return config


def current_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The Alembic revision of the ``kb`` schema, or None when it was never migrated.

    Read through ``kb.schema_version()`` when this role may call it (a ``kb_reader`` role has
    no table privilege), else from the Alembic table."""
    callable_ = conn.execute(queries.SCHEMA_VERSION_CALLABLE).fetchone()
    if callable_ is not None and callable_[0]:
        version = conn.execute(queries.SCHEMA_VERSION).fetchone()
        conn.rollback()
        return None if version is None or version[0] is None else str(version[0])
    exists = conn.execute(queries.VERSION_TABLE_EXISTS).fetchone()
    if not exists or not exists[0]:
        conn.rollback()
        return None
    row = conn.execute(queries.SCHEMA_REVISION).fetchone()
    conn.rollback()
    return None if row is None else str(row[0])


_REVISION = re.compile(r"""^revision\s*=\s*["']([^"']+)["']""", re.M)
_DOWN_REVISION = re.compile(r"""^down_revision\s*=\s*(None|["']([^"']+)["'])""", re.M)


def _revision_graph() -> dict[str, str | None] | None:
    """Each migration's revision and the one it revises, read from the scripts' text (every
    pgkb migration names one bare revision and one down_revision), or None when a script does
    not read that way, and Alembic must be asked."""
    graph: dict[str, str | None] = {}
    for path in sorted(resources.alembic_dir().joinpath("versions").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        revision, down = _REVISION.search(text), _DOWN_REVISION.search(text)
        if revision is None or down is None or revision.group(1) in graph:
            return None
        graph[revision.group(1)] = down.group(2)
    return graph or None


def head_revision() -> str:
    """This pgkb's newest migration: the one no other migration revises."""
    graph = _revision_graph()
    if graph is not None:
        heads = sorted(set(graph) - {down for down in graph.values() if down is not None})
    else:
        from alembic.script import ScriptDirectory

        heads = list(ScriptDirectory.from_config(alembic_config()).get_heads())
    if len(heads) != 1:
        raise DatabaseError(f"this pgkb has {len(heads)} migration heads; reinstall pgkb")
    return str(heads[0])


def known_revisions() -> set[str]:
    graph = _revision_graph()
    if graph is not None:
        return set(graph)
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


# Revisions a release folded into its baseline: they no longer exist, so a database at one of
# them cannot be upgraded by this pgkb. Each release's baseline keeps the id of the newest
# revision it folds (0036: 0009-0036), and names the commit whose pgkb still has the revisions.
FOLDED_REVISIONS: dict[str, tuple[str, str]] = {
    f"{n:04d}": ("0036", "8d1c315") for n in range(9, 36)
}


def folded_error(revision: str) -> None:
    """Raise :class:`DatabaseError` when ``revision`` was folded into a release's baseline."""
    if revision not in FOLDED_REVISIONS:
        return
    baseline, commit = FOLDED_REVISIONS[revision]
    raise DatabaseError(
        f"this database is at revision {revision}, which pgkb 0.1.0 folded into its baseline "
        f"{baseline}: this pgkb cannot upgrade it",
        hint=f"upgrade it to {baseline} with the pgkb of commit {commit} first (in a checkout "
        f"of that commit: pip install -e . && pgkb db upgrade), then with this pgkb; "
        "or re-create the database",
    )


def check_schema(conn: psycopg.Connection[Any]) -> str:
    """Raise :class:`DatabaseError` unless the ``kb`` schema is at this pgkb's head revision."""
    revision = current_revision(conn)
    head = head_revision()
    if revision is None:
        raise DatabaseError(
            "the database has no pgkb schema yet",
            hint="run `pgkb db upgrade` to create it",
        )
    if revision == head:
        return revision
    folded_error(revision)
    if revision not in known_revisions():
        raise DatabaseError(
            f"the kb schema is at revision {revision}, which this pgkb (head {head}) "
            "does not know: it was made by a newer pgkb",
            hint="upgrade pgkb (pip install -U pgkb) before using this database",
        )
    raise DatabaseError(
        f"the kb schema is at revision {revision}, behind this pgkb's {head}",
        hint="run `pgkb db upgrade`",
    )


def _preflight(url: str) -> str | None:
    """Check the server can hold the schema; returns the schema's current revision."""
    conn = connect(url, register=False)
    try:
        row = conn.execute(queries.PGVECTOR_AVAILABLE).fetchone()
        if row is None:
            version = conn.execute(queries.SERVER_VERSION).fetchone()
            raise DatabaseError(
                f"the server at {redact(url)} (PostgreSQL {version[0] if version else '?'}) "
                "has no pgvector extension available",
                hint="install pgvector on that server "
                "(https://github.com/pgvector/pgvector#installation) "
                "or unset PGKB_DATABASE_URL to use pgkb's embedded server, which has it",
            )
        revision = current_revision(conn)
        if revision is not None:
            folded_error(revision)
        if revision is not None and revision not in known_revisions():
            check_schema(conn)  # raises the "made by a newer pgkb" error
    finally:
        conn.close()
    return revision


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the ``kb`` schema of ``url`` to ``revision``. A schema already at the head
    returns at once, without loading Alembic (a second of imports)."""
    current = _preflight(url)
    if revision == "head" and current is not None and current == head_revision():
        return
    from alembic import command

    try:
        command.upgrade(alembic_config(url=url), revision)
    except psycopg.Error as exc:
        raise DatabaseError(f"migration failed on {redact(url)}: {exc}") from exc


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url=url), revision)


def upgrade_connection(connection: Any, revision: str = "head") -> None:
    """Migrate through an existing SQLAlchemy connection (tests inject theirs this way)."""
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)
