"""The commands of the collections guide as processes (the ``pgkb`` console script): the
reading commands under ``PGKB_COLLECTIONS`` (and ``--collection`` over it), ``pgkb remove
--collection`` and ``pgkb eval --collection``, against knowledge bases of two collections
(``tests/processes.py``: fake embeddings, so no process loads a model).

``remove`` and ``eval`` write, so each of their tests gets its own database with the same two
collections; the reading commands share the session's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env
from tests.processes import ENG_TITLES, CollKb, ingest_collections, process_env, run_pgkb


def _json(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_pgkb_collections_keeps_every_reading_command_to_it(
    coll_kb: CollKb, tmp_path: Path
) -> None:
    env = coll_kb.env(PGKB_COLLECTIONS="eng")
    hits = _json(run_pgkb(["search", "readme", "--mode", "keyword", "--json"], env, tmp_path))
    assert {h["title"] for h in hits} == {"Engineering readme"}
    listed = _json(run_pgkb(["docs", "list", "--json"], env, tmp_path))
    assert {d["title"] for d in listed} == ENG_TITLES
    shown = _json(run_pgkb(["docs", "show", "readme.md", "--json"], env, tmp_path))
    assert shown["title"] == "Engineering readme"
    stats = _json(run_pgkb(["stats", "--json"], env, tmp_path))
    assert [c["collection"] for c in stats["collections"]] == ["eng"], stats
    answer = _json(run_pgkb(["ask", "How do I deploy the quokka-flux service?", "--json"], env,
                            tmp_path))  # fmt: skip
    cited = {c["title"] for c in answer["citations"]}
    assert cited and cited <= ENG_TITLES, answer
    # --collection on the command line wins over the environment
    both = ["search", "readme", "--mode", "keyword", "--json", "--collection", "hr"]
    assert {h["title"] for h in _json(run_pgkb(both, env, tmp_path))} == {"HR readme"}
    # a name that is not a collection is refused, naming it
    wrong = run_pgkb(["docs", "list"], coll_kb.env(PGKB_COLLECTIONS="hr,no such"), tmp_path)
    assert wrong.returncode == 2 and "no such" in wrong.stderr, wrong.stderr
    assert "Traceback" not in wrong.stderr


@pytest.fixture
def own_kb(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    """This test's own database with the two collections; the environment of a process."""
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_collections(settings, tmp_path / "docs")
    return process_env(settings_env(settings), tmp_path)


def _documents(db_url: str) -> list[tuple[str, str]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT collection, source_uri FROM kb.documents ORDER BY 1, 2")
        return [(c, Path(s).name) for c, s in rows.fetchall()]


def test_remove_with_collection_removes_that_collections_copy_only(
    own_kb: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    removed = _json(run_pgkb(["remove", "readme.md", "--collection", "eng", "--json"], own_kb,
                             tmp_path))  # fmt: skip
    gone = removed["documents_removed"]
    assert [Path(r["source_uri"]).name for r in gone] == ["readme.md"], removed
    assert _documents(db_url) == [
        ("eng", "createindex.md"), ("hr", "leave.md"), ("hr", "readme.md"),
    ]  # fmt: skip
    # within hr (PGKB_COLLECTIONS), eng's page is not there to remove: nothing goes
    scoped = {**own_kb, "PGKB_COLLECTIONS": "hr"}
    missing = run_pgkb(["remove", "createindex.md", "--json"], scoped, tmp_path)
    assert missing.returncode == 1, missing.stderr
    assert ("eng", "createindex.md") in _documents(db_url)


def test_eval_with_collection_ingests_into_it_and_reads_only_it(
    own_kb: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    """An eng page that repeats the question's words would be the keyword leg's first hit in
    the whole database; eval --collection hr ingests the corpus into hr and never sees it."""
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "sabbatical-notes.md").write_text(
        "# Sabbatical notes\n\n" + "Sabbatical days after ten years of service. " * 6 + "\n"
    )
    run_pgkb(["ingest", str(decoy), "--collection", "eng"], own_kb, tmp_path).check_returncode()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "sabbatical.md").write_text(
        "# Sabbatical\n\nAfter ten years of service an employee may take sixty days of "
        "sabbatical.\n"
    )
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{
        "id": "q1", "question": "How many sabbatical days after ten years of service?",
        "kind": "exact", "sources": ["sabbatical.md"],
    }]))  # fmt: skip
    args = ["eval", "--questions", str(questions), "--corpus", str(corpus), "--k", "1", "--json"]

    scoped = _json(run_pgkb([*args, "--collection", "hr"], own_kb, tmp_path))
    assert scoped["retrievers"]["keyword"]["overall"]["recall@1"] == 1.0, scoped["retrievers"]
    assert ("hr", "sabbatical.md") in _documents(db_url)
    # the same eval over every collection: the decoy in eng comes first
    everywhere = _json(run_pgkb(args, own_kb, tmp_path))
    assert everywhere["retrievers"]["keyword"]["overall"]["recall@1"] == 0.0
    assert ("default", "sabbatical.md") in _documents(db_url)
