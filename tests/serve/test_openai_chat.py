"""``pgkb serve`` as an OpenAI-compatible chat backend, driven by the real ``openai`` client: the
model list, a cited answer with its structured citations, streaming in OpenAI's chunk format
(the text arriving while the chat model is still writing, never a citation the check refuses),
earlier turns as context, the extractive answer without a chat model, and the errors a chat UI
can meet. Also ``/v1/ask`` as server-sent events.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fake_openai import FakeOpenAI, Reply, chat_reply
from tests.serve_fixtures import ServeKb, running, serve_kb  # noqa: F401  (fixture)

pytestmark = pytest.mark.model

TOKEN = "chat-token"
FURNITURE = "Who covers the cost of furniture for my home workspace?"
CITED = (
    "Every employee who works from home may spend up to 600 EUR on furniture, and the company "
    "covers the cost [Home office equipment budget]. Receipts go to the finance team within "
    "30 days [Home office equipment budget]."
)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


def _app(settings: Any) -> Any:
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(settings, pool_size=2).open()
    return create_app(service, token=TOKEN)


@pytest.fixture(scope="module")
def extractive(serve_kb: ServeKb) -> Iterator[str]:  # noqa: F811
    """``pgkb serve`` with no chat model configured."""
    with running(_app(serve_kb.as_reader())) as url:
        yield url


@pytest.fixture(scope="module")
def with_model(serve_kb: ServeKb, fake: FakeOpenAI) -> Iterator[str]:  # noqa: F811
    """``pgkb serve`` whose chat model is the fake OpenAI server."""
    settings = dataclasses.replace(
        serve_kb.as_reader(), chat_model="fake-chat", chat_base_url=fake.base_url
    )
    with running(_app(settings)) as url:
        yield url


def _client(url: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key=TOKEN, max_retries=0, timeout=120)


def _chats(fake: FakeOpenAI) -> list[Any]:
    return fake.requests_to("/v1/chat/completions")


def test_models_and_an_extractive_answer_without_a_chat_model(extractive: str) -> None:
    client = _client(extractive)
    ids = [m.id for m in client.models.list().data]
    assert ids[:2] == ["pgkb", "pgkb/default"], ids
    assert "sentence-transformers/all-MiniLM-L6-v2" in ids  # the embedding model, for embeddings

    reply = client.chat.completions.create(
        model="pgkb", messages=[{"role": "user", "content": FURNITURE}]
    )
    assert reply.object == "chat.completion" and reply.model == "pgkb"
    content = reply.choices[0].message.content
    assert "[Home office equipment budget]" in content and "600 EUR" in content
    assert reply.choices[0].finish_reason == "stop"
    extra = reply.model_extra
    assert extra["citations"][0]["source_uri"].endswith("equipment.md")
    assert extra["pgkb"]["mode"] == "extractive" and extra["pgkb"]["abstained"] is False
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

    # one collection's model answers the same; a question the corpus cannot answer: IDK
    scoped = client.chat.completions.create(
        model="pgkb/default", messages=[{"role": "user", "content": FURNITURE}]
    )
    assert scoped.model_extra["citations"][0]["source_uri"].endswith("equipment.md")
    idk = client.chat.completions.create(
        model="pgkb",
        messages=[
            {
                "role": "user",
                "content": "How do I list the jobs the pg_cron extension has scheduled?",
            }
        ],
    )
    assert idk.choices[0].message.content == "I don't know"
    assert idk.model_extra["pgkb"]["abstained"] is True and idk.model_extra["citations"] == []


def test_a_follow_up_without_a_model_is_read_with_the_previous_question(extractive: str) -> None:
    client = _client(extractive)
    follow_up = "What is left behind when that fails?"
    alone = client.chat.completions.create(
        model="pgkb", messages=[{"role": "user", "content": follow_up}]
    )
    assert not alone.model_extra["citations"][0]["source_uri"].endswith("createindex.md")
    reply = client.chat.completions.create(
        model="pgkb",
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What does CREATE INDEX CONCURRENTLY do?"},
            {"role": "assistant", "content": "It builds an index without locking writes."},
            {"role": "user", "content": [{"type": "text", "text": follow_up}]},
        ],
    )
    assert reply.model_extra["pgkb"]["abstained"] is False
    assert reply.model_extra["citations"][0]["source_uri"].endswith("createindex.md")
    assert "INVALID" in reply.choices[0].message.content


def test_streaming_without_a_model_sends_the_answer_in_openai_chunks(extractive: str) -> None:
    client = _client(extractive)
    stream = client.chat.completions.create(
        model="pgkb",
        messages=[{"role": "user", "content": FURNITURE}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" and c.model == "pgkb" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "[Home office equipment budget]" in text
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason == "stop"]
    assert len(final) == 1
    assert final[0].model_extra["citations"][0]["source_uri"].endswith("equipment.md")
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0

    # the raw wire ends with data: [DONE]
    raw = httpx.post(
        extractive + "/v1/chat/completions",
        json={"model": "pgkb", "stream": True, "messages": [{"role": "user", "content": "x y"}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=120,
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.rstrip().endswith("data: [DONE]")


def test_a_chat_model_answer_streams_while_it_is_written(with_model: str, fake: FakeOpenAI) -> None:
    client = _client(with_model)
    resume = threading.Event()
    reply = chat_reply(CITED)
    fake.script("/v1/chat/completions", dataclasses.replace(reply, pause_after=10, resume=resume))
    stream = client.chat.completions.create(
        model="pgkb", messages=[{"role": "user", "content": FURNITURE}], stream=True
    )
    pieces: list[str] = []
    paused_at_first_text: bool | None = None
    try:
        for chunk in stream:
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                if paused_at_first_text is None:
                    paused_at_first_text = not resume.is_set()
                    resume.set()  # let the model finish
                pieces.append(piece)
            if chunk.choices and chunk.choices[0].finish_reason == "stop":
                final = chunk
    finally:
        resume.set()
    # the first text reached the client while the chat model was still paused mid-reply
    assert paused_at_first_text is True
    text = "".join(pieces)
    assert text.startswith(CITED) and "Sources:" in text and "equipment.md" in text
    assert final.model_extra["pgkb"]["mode"] == "model"
    assert _chats(fake)[-1].body["stream"] is True


def test_a_streamed_reply_never_shows_a_refused_citation_or_an_uncited_answer(
    with_model: str, fake: FakeOpenAI
) -> None:
    client = _client(with_model)

    def streamed(content: str) -> str:
        fake.script("/v1/chat/completions", chat_reply(content))
        stream = client.chat.completions.create(
            model="pgkb", messages=[{"role": "user", "content": FURNITURE}], stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    bad = streamed("Up to 600 EUR [Home office equipment budget] says [Wikipedia] as well.")
    assert "Wikipedia" not in bad and bad.startswith("Up to 600 EUR [Home office equipment budget]")
    uncited = streamed("The company pays for everything, trust me.")
    assert uncited == "I don't know"  # not a word of the uncited reply reached the client


def test_earlier_turns_make_the_question_standalone(with_model: str, fake: FakeOpenAI) -> None:
    client = _client(with_model)
    before = len(_chats(fake))
    fake.script(
        "/v1/chat/completions",
        chat_reply("Who covers the cost of furniture for a home workspace?"),  # the rewrite
        chat_reply(CITED),
    )
    reply = client.chat.completions.create(
        model="pgkb",
        messages=[
            {"role": "user", "content": "I work from home and need a desk."},
            {"role": "assistant", "content": "I don't know"},
            {"role": "user", "content": "Who pays for it?"},
        ],
    )
    rewrite, answer = _chats(fake)[before:]
    assert "I work from home and need a desk." in rewrite.body["messages"][1]["content"]
    assert "Who covers the cost of furniture" in answer.body["messages"][1]["content"]
    assert reply.model_extra["pgkb"]["question"].startswith("Who covers the cost of furniture")
    assert reply.choices[0].message.content.startswith(CITED)


def test_errors_are_openai_shaped(extractive: str) -> None:
    import openai

    client = _client(extractive)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(
            model="pgkb/finance", messages=[{"role": "user", "content": "x"}]
        )
    assert "pgkb/default" in str(missing.value)
    with pytest.raises(openai.BadRequestError) as embedding:
        client.chat.completions.create(
            model="sentence-transformers/all-MiniLM-L6-v2",
            messages=[{"role": "user", "content": "x"}],
        )
    assert "embedding model" in str(embedding.value)
    for payload, says in (
        ({"model": "pgkb", "messages": []}, "non-empty list"),
        ({"model": "pgkb", "messages": [{"role": "assistant", "content": "hi"}]}, "no user"),
        ({"model": "pgkb", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n must"),
        ({"model": "pgkb", "messages": [{"role": "wizard", "content": "x"}]}, "chat role"),
        ({"model": "pgkb", "messages": [{"role": "user", "content": 3}]}, "content"),
    ):
        response = httpx.post(
            extractive + "/v1/chat/completions",
            json=payload,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        assert response.status_code == 400, payload
        assert says in response.json()["error"]["message"], response.text
    with pytest.raises(openai.AuthenticationError):
        _client(extractive).with_options(api_key="wrong").models.list()


def _events(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines.get("event", ""), json.loads(lines["data"])))
    return events


def test_ask_streams_server_sent_events_when_asked(with_model: str, fake: FakeOpenAI) -> None:
    fake.script("/v1/chat/completions", chat_reply(CITED))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = httpx.post(
        with_model + "/v1/ask",
        json={"question": FURNITURE, "stream": True},
        headers=headers,
        timeout=120,
    )
    assert response.status_code == 200
    events = _events(response.text)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "progress" and kinds[-1] == "answer" and "text" in kinds
    answer = events[-1][1]
    assert "".join(d["text"] for k, d in events if k == "text") == answer["answer"] == CITED
    assert answer["citations"][0]["source_uri"].endswith("equipment.md")

    # Accept: text/event-stream asks for the same; a bad question is still a JSON 400
    fake.script("/v1/chat/completions", chat_reply(CITED))
    accepted = httpx.post(
        with_model + "/v1/ask",
        json={"question": FURNITURE},
        headers={**headers, "Accept": "text/event-stream"},
        timeout=120,
    )
    assert _events(accepted.text)[-1][0] == "answer"
    bad = httpx.post(
        with_model + "/v1/ask", json={"question": " ", "stream": True}, headers=headers
    )
    assert bad.status_code == 400 and "question" in bad.json()["error"]["message"]
    plain = httpx.post(with_model + "/v1/ask", json={"question": FURNITURE}, headers=headers)
    assert plain.headers["content-type"] == "application/json"


def test_a_chat_model_failure_falls_back_to_the_passages(with_model: str, fake: FakeOpenAI) -> None:
    fake.script("/v1/chat/completions", *[Reply({"error": {"message": "down"}}, status=500)] * 3)
    client = _client(with_model)
    stream = client.chat.completions.create(
        model="pgkb", messages=[{"role": "user", "content": FURNITURE}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "[Home office equipment budget]" in text and "600 EUR" in text
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert final.model_extra["pgkb"]["mode"] == "fallback"
