"""The kb schema is made only by migrations, and they match sql_functions/ exactly."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory

from loader import resources
from loader.db.migrations import alembic_config
from loader.devtools import snapshot
from tests.helpers import function_file_problems, migrate

KB_FUNCTIONS = """
    SELECT p.proname, pg_get_functiondef(p.oid)
      FROM pg_proc p
     WHERE p.pronamespace = 'kb'::regnamespace
     ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""


def _functions(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in conn.execute(KB_FUNCTIONS).fetchall()]


def _tables(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'kb' AND tablename <> 'alembic_version'"
    ).fetchall()
    return {r[0] for r in rows}


def test_single_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert len(heads) == 1, f"several migration heads: {heads}"


def test_the_revision_read_from_the_scripts_is_alembics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands compare the schema with the head read from the scripts' text, without importing
    Alembic: the same head and revisions Alembic finds; a script that does not read that way
    sends the question to Alembic."""
    from loader.db import migrations

    scripts = ScriptDirectory.from_config(alembic_config())
    assert migrations._revision_graph() is not None
    assert migrations.head_revision() == scripts.get_heads()[0]
    assert migrations.known_revisions() == {s.revision for s in scripts.walk_revisions()}
    monkeypatch.setattr(migrations, "_revision_graph", lambda: None)
    assert migrations.head_revision() == scripts.get_heads()[0]
    assert migrations.known_revisions() == {s.revision for s in scripts.walk_revisions()}


def test_upgrading_a_schema_at_head_does_no_alembic_work(db_url: str, empty_db_url: str) -> None:
    """`pgkb db upgrade` (and each `pgkb quickstart`, which upgrades two databases) on a schema
    at head has nothing to do: it says so without importing Alembic and SQLAlchemy (seconds);
    a schema behind head is still migrated through Alembic."""
    code = (
        "import sys; from loader.db.migrations import upgrade; upgrade(sys.argv[1]); "
        "print('alembic' in sys.modules, 'sqlalchemy' in sys.modules)"
    )
    for url, imported in ((db_url, "False False"), (empty_db_url, "True True")):
        run = subprocess.run(
            [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.split("\n")[-2] == imported, (url, run.stdout)
    with psycopg.connect(empty_db_url) as conn:
        assert "documents" in _tables(conn)


def test_round_trip_base_head_base_head(empty_db_url: str) -> None:
    migrate(empty_db_url, "head")
    with psycopg.connect(empty_db_url) as conn:
        tables = _tables(conn)
        functions = _functions(conn)
    assert {"documents", "chunks", "embeddings", "embedding_models"} <= tables

    from loader.db.migrations import downgrade

    downgrade(empty_db_url, "base")
    with psycopg.connect(empty_db_url) as conn:
        assert _tables(conn) == set()
        assert _functions(conn) == []

    migrate(empty_db_url, "head")
    with psycopg.connect(empty_db_url) as conn:
        assert _tables(conn) == tables
        assert _functions(conn) == functions


def test_every_function_in_the_database_equals_its_file(conn: psycopg.Connection[Any]) -> None:
    """Drift test: after `upgrade head`, re-running every file of sql_functions/ changes nothing,
    and the database has exactly one function per file."""
    migrated = _functions(conn)
    files = snapshot.function_files()
    assert sorted({name for name, _ in migrated}) == sorted(files), (
        "functions in kb and files in sql_functions/ differ"
    )
    assert len(migrated) == len(files), "a function has several overloads in kb"
    conn.execute("SET LOCAL check_function_bodies = off")
    for text in files.values():
        conn.execute(text.encode())
    rebuilt = _functions(conn)
    conn.rollback()
    for (name, old), (_, new) in zip(migrated, rebuilt, strict=True):
        assert old == new, (
            f"kb.{name} in the migrations differs from sql_functions/{name}.sql: run "
            "`python -m loader.devtools.snapshot -m '...'` to write a migration"
        )


def test_the_store_at_head_is_sql_functions() -> None:
    """What `upgrade head` applies (each function's store file of the newest revision that
    names it) is exactly sql_functions/: no function missing, none extra, none different."""
    assert snapshot.store_state(snapshot.migrations()) == snapshot.function_files(), (
        "sql_functions/ and the function store differ: run "
        "`python -m loader.devtools.snapshot -m '...'` to write a migration"
    )


def test_revision_ids_sort_in_chain_order() -> None:
    """downgrade_functions finds a function's newest older revision by comparing store file
    names, so revision ids are four digits that sort as the chain runs."""
    revisions = [m.revision for m in snapshot.migrations()]
    assert all(re.fullmatch(r"\d{4}", r) for r in revisions), revisions
    assert revisions == sorted(revisions), revisions


def _unlisted(directory: Path, files: list[Path], what: str) -> list[Path]:
    """Check every file ``directory/frozen.txt`` lists against its hash; return the files of
    ``files`` it does not list."""
    assert (directory / "frozen.txt").exists(), f"{directory}/frozen.txt is missing"
    frozen = snapshot.frozen_hashes(directory)
    for name, digest in frozen.items():
        path = directory / name
        assert path.exists(), f"landed {what} {name} was removed"
        assert snapshot.file_hash(path) == digest, (
            f"landed {what} {name} was edited; it is immutable: add a new revision"
        )
    return [path for path in files if path.relative_to(directory).as_posix() not in frozen]


def _newest_landed() -> str:
    frozen = snapshot.frozen_hashes(resources.alembic_dir() / "versions")
    # a missing or emptied list would make the checks below check nothing
    assert "0001_initial_schema.py" in frozen, "frozen.txt lists no landed migration"
    return max(frozen)[:4]


def test_landed_migrations_never_change() -> None:
    versions = resources.alembic_dir() / "versions"
    newest = _newest_landed()
    migrations = sorted(versions.glob("[0-9][0-9][0-9][0-9]_*.py"))
    # every migration up to the newest landed one is listed (only unlanded ones may be absent)
    for path in _unlisted(versions, migrations, "migration"):
        assert path.name[:4] > newest, (
            f"{path.name} is not newer than the newest landed migration but not in frozen.txt"
        )


def test_landed_store_files_never_change() -> None:
    store = resources.alembic_dir() / "functions"
    newest = _newest_landed()
    files = snapshot.store_files(store)
    assert files, "the function store is empty"
    # every file of a landed revision is listed (only unlanded revisions' files may be absent)
    for path in _unlisted(store, files, "function store file"):
        assert path.name[:4] > newest, (
            f"{path.relative_to(store)} belongs to a landed revision but is not in "
            "alembic/functions/frozen.txt"
        )


# The modules landed migrations import, frozen like the migrations: replaying 0001 next year runs
# today's helper. A helper never changes; a new behaviour goes into a new module (for example
# loader/migration_ops_v2.py) that new migrations import (see sql_functions/README.md).
FROZEN_HELPERS = {
    "loader/migration_ops.py": "986679079318489260471f3f8f9e079b60672eca8ac4be1b6142e2bfdc21b937",
}


def test_the_helpers_migrations_import_never_change() -> None:
    root = resources.PACKAGE_DIR.parent
    for name, digest in FROZEN_HELPERS.items():
        assert snapshot.file_hash(root / name) == digest, (
            f"{name} is imported by landed migrations and must never change; "
            "put new behaviour in a new versioned module"
        )


def test_migrations_import_only_frozen_helpers() -> None:
    for path in (resources.alembic_dir() / "versions").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loader"):
                helper = str(node.module).replace(".", "/") + ".py"
                assert helper in FROZEN_HELPERS, f"{path.name} imports {node.module}, not frozen"


def test_migrations_never_read_sql_functions_at_run_time() -> None:
    for path in (resources.alembic_dir() / "versions").glob("*.py"):
        text = path.read_text()
        assert "sql_functions" not in text, path.name
        assert "read_text" not in text and "open(" not in text, path.name


@pytest.mark.parametrize("name", sorted(snapshot.function_files()))
def test_function_file_convention(name: str) -> None:
    assert function_file_problems(name, snapshot.function_files()[name]) == []


def test_every_function_has_a_comment(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace "
        "AND obj_description(p.oid, 'pg_proc') IS NULL"
    ).fetchall()
    assert rows == []


def test_schema_has_the_promised_indexes(conn: psycopg.Connection[Any]) -> None:
    indexes = {
        r[0]: r[1]
        for r in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'kb'"
        ).fetchall()
    }
    assert "USING gin (tsv)" in indexes["chunks_tsv_idx"]
    conn.execute("SELECT kb.register_model('m', 3, 'test')")
    model_index = conn.execute(
        "SELECT indexdef FROM pg_indexes "
        "WHERE schemaname = 'kb' AND indexname LIKE 'embeddings_hnsw_model_%'"
    ).fetchone()
    assert model_index is not None
    assert "hnsw" in model_index[0] and "vector_cosine_ops" in model_index[0]
    assert "(embedding)::vector(3)" in model_index[0] and "WHERE (model_id = " in model_index[0]
