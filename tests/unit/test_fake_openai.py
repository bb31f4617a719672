"""The fake OpenAI server answers the real openai client as the API would."""

from __future__ import annotations

from tests.fake_openai import FakeOpenAI, Reply, chat_reply


def test_embeddings_and_chat_round_trip(fake_openai: FakeOpenAI) -> None:
    import openai

    client = openai.OpenAI(base_url=fake_openai.base_url, api_key="test", max_retries=0)
    result = client.embeddings.create(model="m", input=["a", "b"])
    assert [len(d.embedding) for d in result.data] == [fake_openai.dims] * 2
    fake_openai.script("/v1/chat/completions", chat_reply("hello [Doc]"))
    reply = client.chat.completions.create(model="c", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "hello [Doc]"
    assert fake_openai.requests_to("/v1/chat/completions")[0].body["messages"][0]["content"] == "hi"


def test_scripted_errors_reach_the_client(fake_openai: FakeOpenAI) -> None:
    import openai
    import pytest

    client = openai.OpenAI(base_url=fake_openai.base_url, api_key="test", max_retries=0)
    fake_openai.script("/v1/embeddings", Reply({"error": {"message": "slow down"}}, status=429))
    with pytest.raises(openai.RateLimitError):
        client.embeddings.create(model="m", input=["a"])
