"""``pgkb ask`` with real retrieval: pages of the bundled manual, the real local model.

This is the issue's own check: with no chat model configured, an answerable question returns
cited passages and an unanswerable one "I don't know"; against an OpenAI-compatible server the
request carries the contract and a reply citing an unretrieved title is corrected.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from loader.answer.prompt import IDK, RULE_IDK, RULE_UNSUPPORTED
from loader.cli import cli
from loader.resources import sample_corpus_dir
from loader.settings import load_settings
from tests.fake_openai import FakeOpenAI, chat_reply
from tests.helpers import create_database, drop_database

pytestmark = pytest.mark.model

PAGES = [
    "sql-createindex.html",
    "gin-intro.html",
    "brin-intro.html",
    "indexes-types.html",
    "mvcc-intro.html",
    "wal-intro.html",
]


@pytest.fixture(scope="module")
def manual_db(
    pg_url: str, template_db: str, embedder: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Six pages of the manual ingested once for this module with the real model.

    Yields ({file name: title}, the CLI environment); the tests only read.
    """
    from loader.db.session import connection
    from loader.ingest.pipeline import ingest_paths

    name = f"pgkb_answer_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name, template=template_db)
    tmp = tmp_path_factory.mktemp("answer-model")
    try:
        settings = load_settings(env={}, database_url=url, data_dir=str(tmp / "data"))
        folder = tmp / "manual"
        folder.mkdir()
        for page in PAGES:
            shutil.copy(Path(sample_corpus_dir()) / page, folder / page)
        report = ingest_paths(settings, [folder], embedder=embedder)
        assert not report.failed and not report.aborted
        with connection(settings) as conn:
            rows = conn.execute("SELECT source_uri, title FROM kb.documents").fetchall()
        titles = {Path(uri).name: title for uri, title in rows}
        yield titles, {"PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(tmp / "data")}
    finally:
        drop_database(pg_url, name)


@pytest.fixture
def manual(manual_db: tuple[dict[str, str], dict[str, str]]) -> dict[str, str]:
    return manual_db[0]


@pytest.fixture
def cli_env(manual_db: tuple[dict[str, str], dict[str, str]]) -> dict[str, str]:
    return manual_db[1]


def run(cli_env: dict[str, str], *args: str, **env: str) -> Result:
    return CliRunner().invoke(cli, ["ask", *args], env={**cli_env, **env}, catch_exceptions=False)


def test_answerable_without_a_model_returns_cited_passages(
    manual: dict[str, str], cli_env: dict[str, str]
) -> None:
    result = run(cli_env, "--json", "What does the CONCURRENTLY option of CREATE INDEX do?")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["abstained"] is False and data["mode"] == "extractive"
    titles = [c["title"] for c in data["citations"]]
    assert titles[0] == manual["sql-createindex.html"]
    assert "without taking any locks" in data["citations"][0]["content"]
    assert f"[{titles[0]}]" in data["answer"]
    assert "PGKB_CHAT_MODEL" in data["hint"]


@pytest.mark.parametrize(
    "question",
    [
        "How do I list the jobs the pg_cron extension has scheduled?",
        "How do I set up binlog replication between two MySQL servers?",
    ],
)
def test_unanswerable_says_i_dont_know(
    manual: dict[str, str], cli_env: dict[str, str], question: str
) -> None:
    result = run(cli_env, question)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == IDK
    assert "Closest sources found:" in result.stdout


def test_against_a_chat_server_the_contract_holds_and_citations_are_checked(
    manual: dict[str, str], cli_env: dict[str, str], fake_openai: FakeOpenAI
) -> None:
    title = manual["sql-createindex.html"]
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(f"It builds the index without blocking writes [{title}] [Oracle SQL Guide]."),
    )
    result = run(
        cli_env,
        "--json",
        "What does the CONCURRENTLY option of CREATE INDEX do?",
        PGKB_CHAT_BASE_URL=fake_openai.base_url,
        PGKB_CHAT_MODEL="fake-chat",
        PGKB_CHAT_MAX_RETRIES="0",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == f"It builds the index without blocking writes [{title}]."
    assert data["removed_citations"] == ["Oracle SQL Guide"]
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    system, user = (m["content"] for m in request.body["messages"])
    assert RULE_IDK in system and RULE_UNSUPPORTED in system
    assert f"title: {title}\nsource_uri: " in user
    assert user.count("--- chunk ---") == user.count("\ntitle: ") + user.startswith("title: ")


def test_the_agent_reads_a_real_page_through_its_outline(
    manual_db: tuple[dict[str, str], dict[str, str]],
    embedder: Any,
    fake_openai: FakeOpenAI,
) -> None:
    from loader.answer.agent import run_agent
    from loader.db.session import connection
    from loader.providers.chat import ChatClient
    from tests.fake_openai import tool_call

    titles, env = manual_db
    title = titles["sql-createindex.html"]
    settings = load_settings(
        env={},
        database_url=env["PGKB_DATABASE_URL"],
        data_dir=env["PGKB_DATA_DIR"],
        chat_base_url=fake_openai.base_url,
        chat_model="fake-chat",
        chat_max_retries=0,
    )
    with connection(settings) as conn:
        (doc_id,) = conn.execute(
            "SELECT id::text FROM kb.documents WHERE title = %s", (title,)
        ).fetchone() or (None,)
        fake_openai.script(
            "/v1/chat/completions",
            chat_reply(None, [tool_call("read_document", {"document_id": doc_id}, "a")]),
            chat_reply(
                None,
                [
                    tool_call(
                        "search_chunks",
                        {"query": "two scans of the table", "document_ids": [doc_id]},
                        "b",
                    )
                ],
            ),
            chat_reply(f"It scans the table twice [{title}]."),
        )
        answer = run_agent(
            conn,
            settings,
            "What does the CONCURRENTLY option of CREATE INDEX do?",
            embedder=embedder,
            client=ChatClient(settings),
        )
    requests = fake_openai.requests_to("/v1/chat/completions")
    whole = json.loads(requests[1].body["messages"][-1]["content"])
    assert whole["status"] == "outline" and whole["chunk_count"] > 20
    assert "Building Indexes Concurrently" in " ".join(whole["outline"])
    scoped = json.loads(requests[2].body["messages"][-1]["content"])
    assert {r["title"] for r in scoped["results"]} == {title}
    assert any("two scans of the table" in r["content"] for r in scoped["results"])
    assert answer.mode == "agent" and answer.answer == f"It scans the table twice [{title}]."
