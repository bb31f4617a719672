"""Generative ``pgkb ask`` and ``pgkb ask --agent`` as processes (the console script, as the
guides run it) against the knowledge base of two collections (``tests/processes.py``) and the
fake chat server, within a scope: ``--collection hr``, ``PGKB_COLLECTIONS=hr``, a role granted
only hr (``pgkb db grant --read --collection hr``); and as a role granted ``--read`` over every
collection.

The fake server records every request, so the tests read what the model was shown: the prompt
of the single-shot answer, and the agent's first message and each tool result. Within hr none of
it holds anything of eng, whatever the model asks for (eng's words, eng's document ids, a walk
of the graph), an eng title the model cites is removed, and the answer keeps hr's citation. The
``--read`` role answers with the model (single-shot and agent) and reads eng through the
agent's tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, chat_reply, tool_call
from tests.processes import ENG_MARKERS, CollKb, run_pgkb

QUESTION = "How long is parental leave?"
ANSWER = "Parents receive sixteen weeks of paid parental leave [Parental leave]."


def _chat_env(fake: FakeOpenAI) -> dict[str, str]:
    return {
        "PGKB_CHAT_BASE_URL": fake.base_url,
        "PGKB_CHAT_MODEL": "fake-chat",
        "PGKB_CHAT_MAX_RETRIES": "0",
        "PGKB_CHAT_TIMEOUT": "30",
    }


def _ask(kb: CollKb, fake: FakeOpenAI, url: str, args: list[str], cwd: Path, **env: str) -> Any:
    result = run_pgkb(["ask", *args, "--json"], kb.env(url, **_chat_env(fake), **env), cwd)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def _seen_by_the_model(fake: FakeOpenAI) -> list[str]:
    """Every message content the model was sent, in order (tool results included)."""
    return [
        str(m.get("content") or "")
        for request in fake.requests_to("/v1/chat/completions")
        for m in request.body["messages"]
    ]


def _no_eng(texts: list[str]) -> None:
    for text in texts:
        for marker in ENG_MARKERS:
            assert marker not in text, (marker, text[:1500])


SCOPES = {
    "--collection hr": (lambda kb: kb.url, ["--collection", "hr"], {}),
    "PGKB_COLLECTIONS=hr": (lambda kb: kb.url, [], {"PGKB_COLLECTIONS": "hr"}),
    "a role granted hr": (lambda kb: kb.role_url(kb.hr_reader), [], {}),
}


@pytest.mark.parametrize("scope", list(SCOPES))
def test_the_agent_within_hr_never_shows_the_model_anything_of_eng(
    coll_kb: CollKb, fake_openai: FakeOpenAI, tmp_path: Path, scope: str
) -> None:
    url, args, env = SCOPES[scope]
    ids = coll_kb.ids()
    eng_doc = ids[("eng", "createindex.md")]
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(
            None,
            [
                tool_call("search_chunks", {"query": "zanzibarite quokka-flux index"}, "c1"),
                tool_call("read_document", {"document_id": eng_doc}, "c2"),
                tool_call("search_chunks", {"query": "readme", "document_ids": [eng_doc]}, "c3"),
                tool_call("explore_graph", {"query": "zanzibarite quokka"}, "c4"),
                tool_call("read_document", {"document_id": ids[("hr", "leave.md")]}, "c5"),
            ],
        ),
        chat_reply(ANSWER + " Indexes are built CONCURRENTLY [CREATE INDEX]."),
    )
    answer = _ask(coll_kb, fake_openai, url(coll_kb), ["--agent", QUESTION, *args], tmp_path, **env)
    first, second = fake_openai.requests_to("/v1/chat/completions")
    assert first.body["tools"], first.body  # the agent ran, with its tools
    tools = {
        m["tool_call_id"]: m["content"] for m in second.body["messages"] if m["role"] == "tool"
    }
    assert set(tools) == {"c1", "c2", "c3", "c4", "c5"}
    searched = json.loads(tools["c1"])
    assert {r["title"] for r in searched["results"]} <= {"Parental leave", "HR readme"}
    assert "unknown document id" in tools["c2"] and "unknown document id" in tools["c3"]
    assert json.loads(tools["c4"])["documents"] == []
    assert json.loads(tools["c5"])["title"] == "Parental leave"  # hr's own: read
    seen = _seen_by_the_model(fake_openai)
    _no_eng([t.replace(eng_doc, "") for t in seen[:-1]])  # not the model's own reply
    assert answer["mode"] == "agent", answer
    assert {c["title"] for c in answer["citations"]} == {"Parental leave"}, answer
    assert answer["removed_citations"] == ["CREATE INDEX"], answer


@pytest.mark.parametrize("scope", list(SCOPES))
def test_the_single_shot_answer_within_hr(
    coll_kb: CollKb, fake_openai: FakeOpenAI, tmp_path: Path, scope: str
) -> None:
    url, args, env = SCOPES[scope]
    fake_openai.script(
        "/v1/chat/completions", chat_reply(ANSWER + " See also [Engineering readme].")
    )
    question = "How long is the paid parental leave, and is every policy in the readme?"
    answer = _ask(coll_kb, fake_openai, url(coll_kb), [question, *args], tmp_path, **env)
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    prompt = request.body["messages"][1]["content"]
    assert "title: Parental leave" in prompt, prompt
    _no_eng([prompt])
    assert answer["mode"] == "model", answer
    assert {c["title"] for c in answer["citations"]} == {"Parental leave"}, answer
    assert answer["removed_citations"] == ["Engineering readme"], answer


@pytest.mark.parametrize("scope", ["--collection hr", "PGKB_COLLECTIONS=hr", "a role granted hr"])
def test_a_name_only_another_collection_holds_is_unknown_within_hr(
    coll_kb: CollKb, fake_openai: FakeOpenAI, tmp_path: Path, scope: str
) -> None:
    """Asked within hr about quokka-flux (a name only eng holds), every scope answers as a
    knowledge base without eng would: "I don't know", before any model call."""
    url, args, env = SCOPES[scope]
    question = "How do I deploy the quokka-flux service?"
    answer = _ask(coll_kb, fake_openai, url(coll_kb), [question, *args], tmp_path, **env)
    assert answer["abstained"] is True, answer
    assert fake_openai.requests_to("/v1/chat/completions") == []


def test_a_read_role_answers_with_the_model_and_its_agent_reads_every_collection(
    coll_kb: CollKb, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    reader = coll_kb.role_url(coll_kb.reader)
    fake_openai.script("/v1/chat/completions", chat_reply(ANSWER))
    single = _ask(coll_kb, fake_openai, reader, [QUESTION], tmp_path)
    assert single["mode"] == "model" and single["answer"] == ANSWER, single
    assert [c["title"] for c in single["citations"]] == ["Parental leave"], single
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    assert "sixteen weeks" in request.body["messages"][1]["content"]

    eng_doc = coll_kb.ids()[("eng", "createindex.md")]
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(None, [tool_call("read_document", {"document_id": eng_doc}, "r1")]),
        chat_reply("It is built without locking out writes [CREATE INDEX]."),
    )
    agent = _ask(coll_kb, fake_openai, reader, ["--agent", "How is the index built?"], tmp_path)
    read = next(
        m["content"]
        for m in fake_openai.requests_to("/v1/chat/completions")[-1].body["messages"]
        if m["role"] == "tool"
    )
    assert "CONCURRENTLY" in read and json.loads(read)["title"] == "CREATE INDEX", read
    assert agent["mode"] == "agent", agent
    assert [c["title"] for c in agent["citations"]] == ["CREATE INDEX"], agent
