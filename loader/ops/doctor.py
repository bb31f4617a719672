"""``pgkb db doctor``: is this knowledge base healthy? Each check says what it found, why it
matters and how to fix it; any failed check makes the command exit 1.

Checks, in order (a check that cannot run because an earlier one failed is skipped):

server          the database answers
pgvector        the vector extension is installed, version >= 0.8 (iterative index scans)
schema          the kb schema is at this pgkb's migration head
functions       every kb function equals its file in sql_functions/ (the drift test's rule)
indexes         no invalid index in kb (a failed CREATE/REINDEX CONCURRENTLY leaves one), and
                every model has its HNSW index (a killed bulk load leaves it missing)
embeddings      every chunk has a vector of the active model
dims            stored vectors agree with their model's dims; pgkb is configured with the
                active model (its queries are embedded in the active model's space)
settings        the chunk size fits the configured model's input limit
roles           kb_reader and kb_writer exist with the privileges the files of sql_functions/
                grant (read from every file, see ``function_grants``), no table for kb_reader
public_schema   PUBLIC may not create objects in schema public (SECURITY DEFINER functions
                resolve names through it; the default on PostgreSQL <= 14)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import keyword_backend, queries
from loader.db.connect import connect, database_url
from loader.db.migrations import current_revision, head_revision
from loader.errors import PgkbError
from loader.ingest.writer import lock_holder
from loader.providers.embeddings import chunk_size, get_embedder
from loader.resources import function_files, function_grants
from loader.safety import redact
from loader.settings import Settings

MIN_PGVECTOR = (0, 8)


@dataclasses.dataclass
class Check:
    name: str
    status: str  # "ok", "fail", "skip"
    detail: str
    explanation: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "fail"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


EXPLAIN = {
    "server": "pgkb keeps everything in PostgreSQL; nothing works without it.",
    "pgvector": "pgvector 0.8 brought iterative index scans, which filtered vector searches "
    "rely on to return match_count rows.",
    "schema": "the kb tables and functions must be those this pgkb was written for.",
    "functions": "each kb function must equal its file in sql_functions/; a hand edit or a "
    "half-applied migration makes searches behave differently from the code you read.",
    "indexes": "an invalid index is not used by queries but still slows every write; "
    "a failed CREATE INDEX CONCURRENTLY or REINDEX CONCURRENTLY leaves one. A model without its "
    "HNSW index is searched exactly, by reading all its vectors: correct, but slow on a large "
    "knowledge base.",
    "embeddings": "a chunk without a vector of the active model is invisible to vector search.",
    "dims": "vectors of another dimension cannot be compared; queries embedded by a model other "
    "than the active one are compared in the wrong space.",
    "keyword_backend": "the keyword leg's BM25 runs on pg_textsearch's compiled bm25 index "
    "where the database has it (much faster on large corpora), in SQL otherwise; the setting "
    "keyword_backend = pg_textsearch makes searches fail where it is missing.",
    "settings": "a chunk longer than the model's input is silently truncated by the model.",
    "roles": "services log in as members of kb_reader (search only) or kb_writer (the loader); "
    "a wider grant exposes the tables, a missing one breaks the service.",
    "public_schema": "SECURITY DEFINER functions resolve names through schema public; if any "
    "role may create objects there it can plant a function that runs with the owner's rights.",
}


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _check(name: str, ok: bool, detail: str, fix: str = "") -> Check:

    # a detail may quote a URL or DSN (libpq's errors do): never a password in doctor's output
    return Check(name, "ok" if ok else "fail", redact(detail), EXPLAIN[name], "" if ok else fix)


def _skip(name: str, why: str) -> Check:
    return Check(name, "skip", why, EXPLAIN[name])


def _rollback(conn: psycopg.Connection[Any]) -> None:
    if conn.info.transaction_status != 0:
        conn.rollback()


def function_drift(conn: psycopg.Connection[Any]) -> list[str]:
    """Names of kb functions that differ from their file (or are missing, extra, overloaded).

    Re-runs every file of sql_functions/ in a transaction that is rolled back, and compares
    ``pg_get_functiondef`` before and after (as tests/sql/test_migrations.py does)."""
    files = function_files()
    before = conn.execute(queries.KB_FUNCTION_DEFINITIONS).fetchall()
    problems: list[str] = []
    names = [r[0] for r in before]
    for name in sorted(set(files) - set(names)):
        problems.append(f"kb.{name} is missing")
    for name in sorted(set(names) - set(files)):
        problems.append(f"kb.{name} has no file in sql_functions/")
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"kb.{name} has several overloads")
    try:
        conn.execute(queries.NO_FUNCTION_BODY_CHECKS)
        for text in files.values():
            conn.execute(text.encode())
        after = dict(conn.execute(queries.KB_FUNCTION_DEFINITIONS).fetchall())
    finally:
        conn.rollback()
    for name, definition in before:
        if name in after and after[name] != definition and f"kb.{name} differs" not in problems:
            problems.append(f"kb.{name} differs from sql_functions/{name}.sql")
    return problems


def run_checks(settings: Settings) -> list[Check]:
    """Every check, in order; never raises for what it checks."""
    checks: list[Check] = []
    try:
        url = database_url(settings)
        conn: psycopg.Connection[Any] = connect(url, register=False)
    except PgkbError as exc:
        checks.append(
            _check(
                "server",
                False,
                exc.message,
                exc.hint or "start the server or fix PGKB_DATABASE_URL",
            )
        )
        for name in list(EXPLAIN)[1:]:
            checks.append(_skip(name, "the server did not answer"))
        return checks
    try:
        version = conn.execute(queries.SERVER_VERSION).fetchone()
        assert version is not None
        checks.append(_check("server", True, f"{redact(url)}: PostgreSQL {version[0]}"))

        row = conn.execute(queries.PGVECTOR_INSTALLED).fetchone()
        _rollback(conn)
        if row is None:
            checks.append(
                _check(
                    "pgvector",
                    False,
                    "the vector extension is not installed",
                    "pgkb db upgrade creates it (the server needs pgvector >= 0.8)",
                )
            )
        else:
            good = _version(row[0])[:2] >= MIN_PGVECTOR
            checks.append(
                _check(
                    "pgvector",
                    good,
                    f"pgvector {row[0]}",
                    "ALTER EXTENSION vector UPDATE (install pgvector >= 0.8 on the server first)",
                )
            )

        revision = current_revision(conn)
        head = head_revision()
        at_head = revision == head
        checks.append(
            _check(
                "schema",
                at_head,
                f"kb schema at {revision or 'nothing'}, this pgkb's head is {head}",
                "pgkb db upgrade",
            )
        )
        if revision is None:
            for name in list(EXPLAIN)[3:]:
                checks.append(_skip(name, "there is no kb schema"))
            return checks

        try:
            drift = function_drift(conn)
            checks.append(
                _check(
                    "functions",
                    not drift,
                    "; ".join(drift) or "every function equals its file",
                    "pgkb db upgrade; a function edited by hand: re-create it "
                    "from its file in sql_functions/",
                )
            )
        except psycopg.Error as exc:
            _rollback(conn)
            checks.append(_skip("functions", f"cannot compare (run doctor as the kb owner): {exc}"))

        try:
            checks.append(_indexes_check(conn))
        except psycopg.errors.InsufficientPrivilege as exc:  # a --read role (pgkb serve's)
            _rollback(conn)
            checks.append(_skip("indexes", _not_allowed(exc)))
        checks.append(_keyword_backend_check(conn, settings))

        try:
            if not at_head:
                for name in ("embeddings", "dims"):
                    checks.append(_skip(name, "the schema is not at head"))
            else:
                with conn.cursor(row_factory=class_row(queries.ModelCoverage)) as cur:
                    models = cur.execute(queries.DOCTOR_MODELS).fetchall()
                _rollback(conn)
                active = next((m for m in models if m.is_active), None)
                if active is None:
                    checks.append(_check("embeddings", True, "no model registered yet (empty kb)"))
                else:
                    checks.append(
                        _check(
                            "embeddings",
                            active.missing == 0,
                            f"{active.missing} chunk(s) without a vector of the active model "
                            f"{active.name}",
                            f"pgkb models reembed --model {active.name}",
                        )
                    )
                wrong = [f"{m.name} ({m.wrong_dims} vectors)" for m in models if m.wrong_dims]
                problems = ["vectors of the wrong dimension: " + ", ".join(wrong)] if wrong else []
                if active is not None and (active.name, active.dims) != (
                    settings.embedding_model,
                    settings.embedding_dims,
                ):
                    problems.append(
                        f"pgkb is configured with {settings.embedding_model} "
                        f"({settings.embedding_dims} dims) but the active model is {active.name} "
                        f"({active.dims} dims)"
                    )
                checks.append(
                    _check(
                        "dims",
                        not problems,
                        "; ".join(problems) or "vectors and configuration agree",
                        "configure PGKB_EMBEDDING_MODEL / _DIMS / _PROVIDER as the active "
                        "model (pgkb models list); drop a model whose vectors are wrong "
                        "and add it again",
                    )
                )

        except psycopg.errors.InsufficientPrivilege as exc:
            _rollback(conn)
            for name in ("embeddings", "dims"):
                checks.append(_skip(name, _not_allowed(exc)))
        except psycopg.Error as exc:
            _rollback(conn)
            for name in ("embeddings", "dims"):
                checks.append(_check(name, False, f"cannot check: {exc}", "fix the checks above"))
        checks.append(_settings_check(settings))

        roles = {r[0] for r in conn.execute(queries.KB_ROLES).fetchall()}
        missing_roles = sorted({"kb_reader", "kb_writer"} - roles)
        if missing_roles:
            checks.append(
                _check(
                    "roles",
                    False,
                    "missing role(s): " + ", ".join(missing_roles),
                    "CREATE ROLE kb_reader NOLOGIN; CREATE ROLE kb_writer NOLOGIN; "
                    "then pgkb db upgrade again as the kb owner",
                )
            )
        else:
            try:
                with conn.cursor(row_factory=class_row(queries.PrivilegeCheck)) as cur:
                    promised = cur.execute(queries.ROLE_PRIVILEGES, function_grants()).fetchall()
                wrong_grants = [
                    f"{p.what}: expected {'yes' if p.want else 'no'}"
                    for p in promised
                    if bool(p.have) != bool(p.want)
                ]
            except psycopg.Error as exc:  # e.g. a search function is gone with pgvector
                _rollback(conn)
                wrong_grants = [f"cannot check: {exc}"]
            checks.append(
                _check(
                    "roles",
                    not wrong_grants,
                    "; ".join(wrong_grants) or "kb_reader and kb_writer as documented",
                    "REVOKE what is too wide, GRANT what is missing (documentation: "
                    "Roles and grants, docs/guides/roles.md)",
                )
            )
        _rollback(conn)

        may_create = conn.execute(queries.PUBLIC_MAY_CREATE).fetchone()
        public_create = bool(may_create is not None and may_create[0])
        _rollback(conn)
        checks.append(
            _check(
                "public_schema",
                not public_create,
                "PUBLIC may create objects in schema public"
                if public_create
                else "PUBLIC may not create in schema public",
                "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
            )
        )
    finally:
        conn.close()
    return checks


def _not_allowed(exc: psycopg.Error) -> str:
    what = (exc.diag.message_primary or str(exc)).strip()
    return f"this role may not read what it needs ({what}); run doctor as the kb owner"


def _indexes_check(conn: psycopg.Connection[Any]) -> Check:
    """No invalid kb index, and every model (up to 2,000 dims) has its HNSW index, unless a load
    holding the ingestion lock dropped it for a bulk load and builds it when it ends."""
    invalid = [r[0] for r in conn.execute(queries.INVALID_KB_INDEXES).fetchall()]
    missing = conn.execute(queries.MODELS_WITHOUT_INDEX).fetchall()
    pid, holder = lock_holder(conn) if missing else (None, "")
    _rollback(conn)
    named = ", ".join(f"{index} (model {name})" for _, name, index in missing)
    problems = []
    if invalid:
        problems.append("invalid: " + ", ".join(invalid))
    if missing and pid is None:
        problems.append(
            "missing HNSW index: " + named + " (a bulk load was killed before building it "
            "again; searches through the model are exact and slow)"
        )
    detail = "; ".join(problems) or "all valid"
    if missing and pid is not None:
        detail += (
            f"; {named} dropped for a bulk load that {holder or 'a pgkb run'} (backend pid "
            f"{pid}) is running: it builds the index again when it ends"
        )
    return _check(
        "indexes",
        not problems,
        detail,
        "pgkb db reindex (rebuilds invalid indexes concurrently and builds a model's missing "
        "HNSW index)",
    )


def _keyword_backend_check(conn: psycopg.Connection[Any], settings: Settings) -> Check:
    """Which keyword backend serves, and why; a failure only when the setting asks for
    pg_textsearch and it cannot serve (searches would raise PK040)."""
    try:
        found = keyword_backend.status(conn, settings)
    except psycopg.Error as exc:
        _rollback(conn)
        return _skip("keyword_backend", f"cannot tell (schema not at head?): {exc}")
    _rollback(conn)
    return _check(
        "keyword_backend",
        found.get("backend") != "unavailable",
        keyword_backend.describe(found),
        "pgkb db upgrade as the kb owner on a server that loads pg_textsearch, or set "
        "keyword_backend to auto or sql",
    )


def _settings_check(settings: Settings) -> Check:

    try:
        embedder = get_embedder(settings)
        size = chunk_size(settings, embedder)
    except PgkbError as exc:
        return _check("settings", False, exc.message, exc.hint or "fix the setting")
    return _check(
        "settings",
        True,
        f"chunk_tokens={size} fits {settings.embedding_model}'s input "
        f"of {embedder.max_input_tokens} tokens",
    )


def render(checks: list[Check]) -> str:
    lines = []
    mark = {"ok": "ok  ", "fail": "FAIL", "skip": "skip"}
    for c in checks:
        lines.append(f"[{mark[c.status]}] {c.name}: {c.detail}")
        if c.status != "ok":
            lines.append(f"       why: {c.explanation}")
        if c.fix:
            lines.append(f"       fix: {c.fix}")
    failed = sum(1 for c in checks if c.status == "fail")
    lines.append("")
    lines.append("all checks passed" if not failed else f"{failed} check(s) failed")
    return "\n".join(lines)
