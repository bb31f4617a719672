"""pgkb search and pgkb ask take the SQL functions' filters: --source, --meta, --min-similarity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from loader.cli import cli
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env, write_docs


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _kb(db_url: str, tmp_path: Path, fake: FakeOpenAI) -> tuple[dict[str, str], Path]:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake)
    assert ingest_paths(settings, [root]).exit_code == 0
    assert ingest_paths(settings, [root / "guides"], meta={"team": "dba"}).exit_code == 0
    return settings_env(settings), root


def _hits(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    result = run(["search", *args, "--json"], env)
    assert result.exit_code == 0, result.output
    return list(json.loads(result.stdout))


def test_search_filters_by_source_metadata_and_similarity(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env, _ = _kb(db_url, tmp_path, fake_openai)
    everything = _hits(env, "storage", "checkpoints", "locks", "--mode", "keyword", "-n", "20")
    assert {Path(h["source_uri"]).name for h in everything} >= {"vacuum.md", "notes.txt"}

    guides = _hits(env, "storage checkpoints locks", "--source", "%/guides/%", "-n", "20")
    assert guides and all("/guides/" in h["source_uri"] for h in guides)

    dba = _hits(env, "storage checkpoints locks", "--meta", "team=dba", "-n", "20")
    assert dba and all(h["metadata"]["team"] == "dba" for h in dba)
    assert _hits(env, "storage", "--meta", "team=nobody") == []

    vector = _hits(env, "storage", "--mode", "vector", "-n", "20")
    assert len(vector) > 2
    cut = sorted(h["vector_similarity"] for h in vector)[len(vector) // 2]
    kept = _hits(env, "storage", "--mode", "vector", "-n", "20", "--min-similarity", str(cut))
    assert kept and len(kept) < len(vector)
    assert all(h["vector_similarity"] >= cut for h in kept)

    bad = run(["search", "storage", "--meta", "team"], env)
    assert bad.exit_code == 2 and "'team' is not key=value" in bad.output


def test_ask_takes_the_same_filters(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    env, _ = _kb(db_url, tmp_path, fake_openai)
    env = {**env, "PGKB_ABSTENTION": "false"}
    result = run(
        ["ask", "what about storage and checkpoints?", "--source", "%notes%", "--json"], env
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["citations"]
    assert all(c["source_uri"].endswith("notes.txt") for c in data["citations"])
    nothing = run(["ask", "storage?", "--meta", "team=nobody", "--json"], env)
    assert nothing.exit_code == 0, nothing.output
    assert json.loads(nothing.stdout)["citations"] == []
