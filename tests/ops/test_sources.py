"""pgkb ingest --root: source_uri relative to a root, so a moved folder is the same documents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner

from loader.cli import cli
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env, write_docs


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _uris(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT source_uri FROM kb.documents ORDER BY 1").fetchall()
    conn.rollback()
    return [r[0] for r in rows]


def test_the_same_folder_mounted_elsewhere_is_the_same_documents(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    env = settings_env(ingest_settings(db_url, tmp_path, fake_openai))
    first = tmp_path / "host-a" / "docs"
    write_docs(first)
    result = run(["ingest", str(first), "--root", str(first), "--json"], env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["new"] == 5
    uris = _uris(conn)
    assert uris == ["guide.pdf", "guides/vacuum.md", "guides/wal.md", "notes.txt", "page.html"]

    # the same folder elsewhere (another host's mount): nothing new, nothing changed
    second = tmp_path / "host-b" / "mnt" / "docs"
    shutil.copytree(first, second)
    shutil.rmtree(first)
    again = run(["ingest", str(second), "--root", str(second), "--prune", "--json"], env)
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    assert (data["new"], data["changed"], data["unchanged"], data["pruned"]) == (0, 0, 5, 0)
    assert _uris(conn) == uris

    # prune respects the scheme, both ways: a run without the root (absolute source_uri) never
    # prunes the root-relative documents, and a run with the root never prunes absolute ones,
    # even when their files are gone (each run has a candidate of the other scheme to prune)
    guides = second / "guides"
    absolute = run(["ingest", str(guides), "--json"], env)
    assert json.loads(absolute.stdout)["new"] == 2  # the same files, under absolute paths
    (guides / "wal.md").unlink()
    (second / "notes.txt").unlink()
    absolute = run(["ingest", str(guides), "--prune", "--json"], env)
    assert json.loads(absolute.stdout)["pruned"] == 1, absolute.output  # its own wal.md only
    assert "guides/wal.md" in _uris(conn)  # root-relative, file gone: not this run's
    assert str(guides / "wal.md") not in _uris(conn)
    (guides / "vacuum.md").unlink()
    pruned = run(
        ["ingest", str(second), "--root", str(second), "--prune", "--force", "--json"], env
    )
    assert json.loads(pruned.stdout)["pruned"] == 3, pruned.output
    assert str(guides / "vacuum.md") in _uris(conn)  # absolute, file gone: not this run's
    conn.execute("DELETE FROM kb.documents WHERE source_uri LIKE '/%%'")
    conn.commit()
    assert _uris(conn) == ["guide.pdf", "page.html"]

    # the setting does the same as the option; remove takes a path under the root
    env_root = {**env, "PGKB_SOURCE_ROOT": str(second)}
    assert json.loads(run(["ingest", str(second), "--json"], env_root).stdout)["unchanged"] == 2
    removed = run(["docs", "remove", str(second / "page.html")], env_root)
    assert removed.exit_code == 0, removed.output
    assert "page.html" not in _uris(conn)


def test_files_outside_the_root_are_refused(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    env = settings_env(ingest_settings(db_url, tmp_path, fake_openai))
    docs = tmp_path / "docs"
    write_docs(docs)
    result = run(["ingest", str(docs), "--root", str(docs / "guides")], env)
    assert result.exit_code == 2
    assert f"is outside the source root {docs / 'guides'}" in result.stderr
    missing = run(["ingest", str(docs), "--root", str(tmp_path / "nope")], env)
    assert missing.exit_code == 2
    assert _uris(conn) == []
