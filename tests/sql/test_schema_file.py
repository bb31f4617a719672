"""``alembic/schema.sql`` is the schema a database migrated to head has: tables, indexes,
triggers, roles and grants (``pg_dump --schema-only``, cleaned; functions are in
``sql_functions/``). A migration that changes the schema without regenerating the file fails here.

Regenerate: ``WRITE_SCHEMA_SQL=1 python -m pytest tests/sql/test_schema_file.py``.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import Any

import psycopg
import pytest

from loader.devtools.schema import SCHEMA_FILE, pg_dump_binary, pg_dump_major, render


@pytest.fixture(scope="module")
def pg_dump() -> str:
    try:
        return pg_dump_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _recorded_major() -> int:
    found = re.search(r"^-- pg_dump major version: (\d+)$", SCHEMA_FILE.read_text("utf-8"), re.M)
    assert found, f"{SCHEMA_FILE} has no pg_dump version line"
    return int(found.group(1))


def test_schema_file_matches_a_freshly_migrated_database(db_url: str, pg_dump: str) -> None:
    text = render(db_url, pg_dump)
    if os.environ.get("WRITE_SCHEMA_SQL"):
        SCHEMA_FILE.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_FILE.write_text(text, encoding="utf-8")
    if pg_dump_major(pg_dump) != _recorded_major():
        pytest.skip("schema.sql was written by another pg_dump major version")
    expected = SCHEMA_FILE.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(True), text.splitlines(True), "alembic/schema.sql", "migrated"
        )
    )
    assert text == expected, (
        "alembic/schema.sql differs from a database migrated to head; regenerate it with "
        "WRITE_SCHEMA_SQL=1 python -m pytest tests/sql/test_schema_file.py\n" + diff
    )


def test_a_schema_change_shows_in_the_comparison(
    db_url: str, conn: psycopg.Connection[Any], pg_dump: str
) -> None:
    before = render(db_url, pg_dump)
    conn.execute("CREATE INDEX settings_probe_idx ON kb.settings (updated_at)")
    conn.commit()
    after = render(db_url, pg_dump)
    assert "settings_probe_idx" in after and "settings_probe_idx" not in before


def test_functions_are_left_to_sql_functions() -> None:
    text = SCHEMA_FILE.read_text(encoding="utf-8")
    assert "CREATE FUNCTION" not in text and "CREATE OR REPLACE FUNCTION" not in text
    for needed in ("CREATE TABLE kb.documents", "CREATE TRIGGER", "CREATE ROLE kb_reader"):
        assert needed in text
