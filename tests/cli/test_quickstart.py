"""``pgkb quickstart`` leaves the user's knowledge base alone: the sample goes into a demo
database of its own on the same server, and ``pgkb quickstart --remove`` drops it (only it).

The bundled sample is replaced by two small pages here (the whole sample is ingested by
``tests/ingest/test_ingest.py::test_quickstart_ingests_the_sample_corpus``), embedded by the fake
OpenAI-compatible server, so these tests take seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.db.connect import connect
from loader.db.demo import demo_database_name, demo_url
from loader.errors import DatabaseError
from tests.fake_openai import FakeOpenAI
from tests.helpers import admin_connection
from tests.helpers import ingest_settings as _settings
from tests.helpers import settings_env as _env


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://u:p@db:5432/kb?sslmode=require",
            "postgresql://u:p@db:5432/kb_demo?sslmode=require",
        ),
        (
            "postgresql://postgres@/pgkb?host=/tmp/sock&port=5432",
            "postgresql://postgres@/pgkb_demo?host=/tmp/sock&port=5432",
        ),
        ("postgres://u@db", "postgres://u@db/u_demo"),
        ("postgresql://u@db/kb?dbname=other", "postgresql://u@db/other_demo"),
    ],
)
def test_the_demo_database_is_named_after_the_configured_one(url: str, expected: str) -> None:
    assert demo_url(url) == expected


def test_a_dsn_cannot_name_a_demo_database() -> None:
    with pytest.raises(DatabaseError, match="--demo-url"):
        demo_url("host=db dbname=kb")


def _exists(pg_url: str, name: str) -> bool:
    with admin_connection(pg_url) as admin:
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return found is not None


def _sources(url: str) -> list[str]:
    with connect(url) as conn:
        rows = conn.execute("SELECT source_uri FROM kb.documents ORDER BY 1").fetchall()
    return [row[0] for row in rows]


@pytest.fixture
def small_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    sample = tmp_path / "sample"
    sample.mkdir()
    (sample / "create-index.md").write_text(
        "# CREATE INDEX\n\nCONCURRENTLY builds the index without taking any locks that "
        "prevent concurrent inserts, updates, or deletes on the table.\n"
    )
    (sample / "vacuum.md").write_text(
        "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples.\n"
    )
    monkeypatch.setattr("loader.resources.sample_corpus_dir", lambda: sample)
    return sample


def test_quickstart_keeps_the_sample_out_of_the_users_knowledge_base(
    db_url: str,
    pg_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    small_sample: Path,
    conn: psycopg.Connection[Any],
) -> None:
    env = _env(_settings(db_url, tmp_path, fake_openai))
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.md").write_text(
        "# My notes\n\nThe team restarts the billing service on Fridays.\n"
    )
    demo = demo_database_name(db_url)
    try:
        first = CliRunner().invoke(cli, ["ingest", str(notes)], env=env)
        assert first.exit_code == 0, first.output
        result = CliRunner().invoke(cli, ["quickstart"], env=env)
        assert result.exit_code == 0, result.output
        assert "demo database" in result.stderr
        assert "pgkb quickstart --remove" in result.stdout
        assert _exists(pg_url, demo)
        # the sample is in the demo database, the user's knowledge base holds only their notes
        assert [Path(s).name for s in _sources(demo_url(db_url))] == [
            "create-index.md",
            "vacuum.md",
        ]
        assert _sources(db_url) == [str(notes / "mine.md")]
        # the user's next ingest (with --prune) still sees only their own documents
        again = CliRunner().invoke(cli, ["ingest", str(notes), "--prune", "--json"], env=env)
        assert again.exit_code == 0, again.output
        assert _sources(db_url) == [str(notes / "mine.md")]
        # the search of the user's knowledge base finds nothing of the sample
        search = CliRunner().invoke(cli, ["search", "CONCURRENTLY", "--mode", "keyword"], env=env)
        assert search.exit_code == 0, search.output
        assert "create-index.md" not in search.output
    finally:
        removed = CliRunner().invoke(cli, ["quickstart", "--remove"], env=env)
    assert removed.exit_code == 0, removed.output
    assert f"removed the demo database {demo}" in removed.stdout
    assert not _exists(pg_url, demo)
    assert _sources(db_url) == [str(notes / "mine.md")]
    # removing again is a no-op that says so
    twice = CliRunner().invoke(cli, ["quickstart", "--remove"], env=env)
    assert twice.exit_code == 0, twice.output
    assert "no demo database" in twice.stdout


def test_remove_never_drops_the_configured_knowledge_base(
    db_url: str, pg_url: str, cli_env: dict[str, str]
) -> None:
    result = CliRunner().invoke(cli, ["quickstart", "--remove", "--demo-url", db_url], env=cli_env)
    assert result.exit_code == 2, result.output
    assert "nothing was dropped" in result.stderr
    assert _exists(pg_url, psycopg.conninfo.conninfo_to_dict(db_url)["dbname"])


def test_the_first_run_notice_only_on_the_first_run(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, small_sample: Path
) -> None:
    env = _env(_settings(db_url, tmp_path, fake_openai))
    try:
        first = CliRunner().invoke(cli, ["quickstart"], env=env)
        assert first.exit_code == 0, first.output
        assert "first run, every page is embedded once" in first.stderr
        second = CliRunner().invoke(cli, ["quickstart"], env=env)
        assert second.exit_code == 0, second.output
        assert "first run" not in second.stderr
        assert "(unchanged pages are skipped)" in second.stderr
        assert "2 unchanged" in second.stderr
    finally:
        CliRunner().invoke(cli, ["quickstart", "--remove"], env=env)
