"""``pgkb ask`` end to end: the CLI, a real database, the fake server for chat and embeddings.

The query embeddings come from the fake server (deterministic hash vectors of the model's
4 dimensions), so the vector leg is noise here and the keyword leg does the finding (the env
gives the noise leg half the keyword leg's weight, where the default gives it twice): these
tests are about what ``ask`` prints and returns, not about ranking quality.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from loader.answer.prompt import IDK, RULE_IDK
from loader.cli import cli
from tests.fake_openai import FakeOpenAI, chat_reply
from tests.helpers import MODEL, load_corpus

ANSWERABLE = "Which index type is the default?"
UNANSWERABLE = "How does MySQL handle replication lag with Galera?"


@pytest.fixture
def fake4() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(dims=4).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def env(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], fake4: FakeOpenAI
) -> dict[str, str]:
    load_corpus(conn)
    return {
        **cli_env,
        "PGKB_EMBEDDING_PROVIDER": "openai",
        "PGKB_EMBEDDING_BASE_URL": fake4.base_url,
        "PGKB_EMBEDDING_MODEL": MODEL,
        "PGKB_EMBEDDING_DIMS": "4",
        "PGKB_CHAT_MAX_RETRIES": "0",
        "PGKB_CHAT_TIMEOUT": "5",
        "PGKB_VECTOR_WEIGHT": "0.5",
    }


def with_chat(env: dict[str, str], fake: FakeOpenAI) -> dict[str, str]:
    return {**env, "PGKB_CHAT_BASE_URL": fake.base_url, "PGKB_CHAT_MODEL": "fake-chat"}


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, ["ask", *args], env=env, catch_exceptions=False)


def chats(fake: FakeOpenAI) -> list[Any]:
    return fake.requests_to("/v1/chat/completions")


def test_no_model_answerable_prints_cited_passages(env: dict[str, str], fake4: FakeOpenAI) -> None:
    result = run(env, ANSWERABLE)
    assert result.exit_code == 0, result.output
    assert "[Index Types] (/kb/indexes-types.md)" in result.stdout
    assert "B-tree is the default index type" in result.stdout
    assert "Sources:" in result.stdout
    assert "PGKB_CHAT_MODEL" in result.stderr
    assert chats(fake4) == []


def test_no_model_json(env: dict[str, str]) -> None:
    result = run(env, "--json", ANSWERABLE)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["abstained"] is False and data["mode"] == "extractive"
    assert data["citations"][0]["title"] == "Index Types"
    assert set(data["citations"][0]) >= {
        "title",
        "source_uri",
        "document_id",
        "chunk_index",
        "content",
        "score",
    }
    assert isinstance(data["related_documents"], list)
    assert "PGKB_CHAT_MODEL" in data["hint"]


def test_unanswerable_says_i_dont_know_with_the_closest_sources(
    env: dict[str, str], fake4: FakeOpenAI
) -> None:
    result = run(with_chat(env, fake4), UNANSWERABLE)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == IDK
    assert "Closest sources found:" in result.stdout
    # the closest passages follow "I don't know", labelled so nobody reads them as the answer
    lines = result.stdout.splitlines()
    shown = lines.index("Closest passages (closest, not an answer):")
    assert shown > 0 and lines[shown + 1].startswith("  [") and lines[shown + 2].startswith("    ")
    assert chats(fake4) == []
    data = json.loads(run(with_chat(env, fake4), "--json", UNANSWERABLE).stdout)
    assert data["abstained"] is True and data["answer"] == IDK and data["citations"] == []
    assert data["related_documents"]


def test_a_reply_citing_an_unretrieved_title_is_corrected(
    env: dict[str, str], fake4: FakeOpenAI
) -> None:
    fake4.script(
        "/v1/chat/completions",
        chat_reply("B-tree is the default [Index Types], says [The MySQL Manual]."),
    )
    result = run(with_chat(env, fake4), "--json", ANSWERABLE)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == "B-tree is the default [Index Types], says."
    assert data["removed_citations"] == ["The MySQL Manual"]
    assert [c["title"] for c in data["citations"]] == ["Index Types"]
    (request,) = chats(fake4)
    assert RULE_IDK in request.body["messages"][0]["content"]
    assert (
        "title: Index Types\nsource_uri: /kb/indexes-types.md"
        in (request.body["messages"][1]["content"])
    )


def test_text_output_reports_removed_citations(env: dict[str, str], fake4: FakeOpenAI) -> None:
    fake4.script("/v1/chat/completions", chat_reply("B-tree [Index Types] [Wikipedia]."))
    result = run(with_chat(env, fake4), "--show-context", ANSWERABLE)
    assert result.exit_code == 0, result.output
    assert "Context given to the model:" in result.stdout
    assert "B-tree [Index Types]." in result.stdout
    assert "[Wikipedia]" in result.stderr and "removed citations" in result.stderr


def test_the_agent_from_the_command_line(env: dict[str, str], fake4: FakeOpenAI) -> None:
    fake4.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    result = run(with_chat(env, fake4), "--agent", "--json", ANSWERABLE)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mode"] == "agent" and data["answer"] == "B-tree [Index Types]."
    assert chats(fake4)[0].body["tools"]


def test_a_dead_chat_server_still_answers(env: dict[str, str]) -> None:
    dead = {**env, "PGKB_CHAT_BASE_URL": "http://127.0.0.1:9/v1", "PGKB_CHAT_MODEL": "m"}
    result = run(dead, ANSWERABLE)
    assert result.exit_code == 0, result.output
    assert "[Index Types]" in result.stdout
    assert "cannot reach the chat model" in result.stderr


def test_bad_input_gets_a_clean_message(env: dict[str, str]) -> None:
    empty = run(env, "  ")
    assert empty.exit_code == 2
    assert "the question is empty" in empty.stderr
    openai_without_key = run({**env, "PGKB_CHAT_MODEL": "gpt-4o-mini"}, ANSWERABLE)
    assert openai_without_key.exit_code == 2
    assert "PGKB_CHAT_API_KEY" in openai_without_key.stderr
    assert "Traceback" not in openai_without_key.output
    bad_steps = run({**env, "PGKB_AGENT_MAX_STEPS": "0"}, "--agent", ANSWERABLE)
    assert bad_steps.exit_code == 2 and "agent_max_steps" in bad_steps.stderr


def test_a_streamed_reply_is_followed_by_the_checked_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loader.answer.passages import Passage
    from loader.answer.result import Answer
    from loader.cli.ask import _print

    passage = Passage(uuid.UUID(int=1), "Index Types", "/kb/indexes-types.md", 1, "B-tree...", 0.03)
    checked = Answer(
        question="q",
        answer="B-tree [Index Types].",
        abstained=False,
        mode="model",
        citations=[passage],
        related_documents=[],
        removed_citations=["Wikipedia"],
        notes=["removed citations of sources that were not retrieved: [Wikipedia]"],
    )
    _print(checked, show_context=False, streamed="B-tree [Index Types] [Wikipedia].")
    out, err = capsys.readouterr()
    assert "Checked answer:\nB-tree [Index Types].\n" in out
    assert "[Wikipedia]" in err
    unchanged = Answer("q", "B-tree [Index Types].", False, "model", [passage], [])
    _print(unchanged, show_context=False, streamed="B-tree [Index Types].")
    out, _ = capsys.readouterr()
    # the streamed text is already on the terminal: nothing is repeated
    assert "Checked answer" not in out and "B-tree [Index Types]." not in out


def test_a_dead_embedding_api_degrades_to_keyword_search(env: dict[str, str]) -> None:
    dead = {
        **env,
        "PGKB_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1",
        "PGKB_EMBEDDING_MAX_RETRIES": "0",
    }
    result = run(dead, ANSWERABLE)
    assert result.exit_code == 0, result.output
    assert "[Index Types]" in result.stdout
    assert "searched by keywords only" in result.stderr
    agent = run(dead, "--agent", "--json", ANSWERABLE)
    assert agent.exit_code == 0, agent.output
    assert "searched by keywords only" in json.loads(agent.stdout)["notes"][0]


def test_on_a_terminal_the_reply_streams(env: dict[str, str], fake4: FakeOpenAI) -> None:
    """Run the real console script in a pseudo-terminal: the reply arrives as a stream."""
    import os
    import pty
    import re
    import subprocess
    import sys
    from pathlib import Path

    fake4.script(
        "/v1/chat/completions", chat_reply("B-tree is the default [Index Types] [Wikipedia].")
    )
    leader, follower = pty.openpty()
    pgkb = Path(sys.executable).with_name("pgkb")
    process = subprocess.Popen(
        [str(pgkb), "ask", ANSWERABLE],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env={**os.environ, **with_chat(env, fake4)},
    )
    os.close(follower)
    output = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        output += data
    _, stderr = process.communicate(timeout=120)
    os.close(leader)
    assert process.returncode == 0, stderr.decode()
    text = re.sub(r"\x1b\[[0-9;]*m", "", output.decode().replace("\r\n", "\n"))
    assert text.startswith("B-tree is the default [Index Types] [Wikipedia].")
    assert "Checked answer:\nB-tree is the default [Index Types]." in text
    assert chats(fake4)[0].body["stream"] is True
    assert b"[Wikipedia]" in stderr


def test_no_transaction_stays_open_while_the_model_answers(
    env: dict[str, str], fake4: FakeOpenAI, db_url: str
) -> None:
    seen: list[int] = []

    def reply(request: Any) -> Any:
        with psycopg.connect(db_url) as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
            ).fetchone()
            seen.append(row[0] if row else -1)
        return chat_reply("B-tree [Index Types].")

    fake4.script("/v1/chat/completions", reply, reply)
    assert run(with_chat(env, fake4), ANSWERABLE).exit_code == 0
    assert run(with_chat(env, fake4), "--agent", ANSWERABLE).exit_code == 0
    assert seen == [0, 0]


def test_ask_lists_related_documents_from_the_graph_within_the_category(
    env: dict[str, str], conn: psycopg.Connection[Any], fake4: FakeOpenAI
) -> None:
    ids = dict(conn.execute("SELECT title, id FROM kb.documents").fetchall())
    conn.execute(
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type) "
        "VALUES (%s, %s, 'supersedes')",
        (ids["Index Types"], ids["Checkpoint Tuning"]),
    )
    conn.commit()
    fake4.script("/v1/chat/completions", *[chat_reply("B-tree [Index Types].")] * 2)
    chat_env = with_chat(env, fake4)
    everything = json.loads(run(chat_env, ANSWERABLE, "--json").output)
    assert "Checkpoint Tuning" in {d["title"] for d in everything["related_documents"]}
    result = run(chat_env, ANSWERABLE, "--category", "manual")
    assert result.exit_code == 0, result.output
    assert "Index Types" in result.output
    # the graph's edge to the guide is not followed outside --category
    assert "Checkpoint Tuning" not in result.output


def test_ask_json_always_has_the_abstention_key(env: dict[str, str], fake4: FakeOpenAI) -> None:
    """The documented ``abstention`` (the gate's ``reason`` and the retrieval ``signals``) is in
    every answer, not only in "I don't know": extractive, the model's, the agent's."""
    fake4.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    fake4.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    for mode, args, chat in (
        ("extractive", ["--json", ANSWERABLE], False),
        ("model", ["--json", ANSWERABLE], True),
        ("agent", ["--agent", "--json", ANSWERABLE], True),
        ("abstained", ["--json", UNANSWERABLE], True),
    ):
        result = run(with_chat(env, fake4) if chat else env, *args)
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["mode"] == mode, data
        gate = data["abstention"]
        assert set(gate) == {"reason", "signals"}, (mode, gate)
        assert gate["reason"] and isinstance(gate["signals"], dict) and gate["signals"], mode
        if mode != "abstained":
            assert gate["reason"] == "retrieval signals look answerable", (mode, gate)
