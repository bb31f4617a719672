"""The answer contract without a database: the prompt, citation checking, the chat client."""

from __future__ import annotations

import threading
import uuid

import pytest

from loader.answer.citations import check_citations, is_idk
from loader.answer.extractive import best_excerpt, extractive_answer
from loader.answer.passages import Passage
from loader.answer.prompt import (
    IDK,
    RULE_IDK,
    RULE_UNSUPPORTED,
    SYSTEM_RULES,
    build_messages,
    clean_question,
    prepare_question,
)
from loader.errors import ConfigError, PgkbError
from loader.providers.chat import ChatClient, ChatError
from loader.settings import load_settings
from tests.fake_openai import FakeOpenAI, Reply, chat_reply

D1, D2, D3 = (uuid.UUID(int=n) for n in (1, 2, 3))
INDEX = Passage(D1, "Index Types", "/docs/indexes-types.html", 2, "B-tree is the default.", 0.03)
VACUUM = Passage(D2, "VACUUM", "/docs/sql-vacuum.html", 0, "VACUUM reclaims storage.", 0.02)
PASSAGES = [INDEX, VACUUM]


# --- the prompt -----------------------------------------------------------------------------


def test_system_rules_hold_the_contract_sentences() -> None:
    assert RULE_IDK == 'If the chunks do not contain the answer, answer exactly "I don\'t know".'
    assert RULE_UNSUPPORTED == "An unsupported answer is a bug as severe as a crash."
    assert RULE_IDK in SYSTEM_RULES
    assert RULE_UNSUPPORTED in SYSTEM_RULES
    assert "cite" in SYSTEM_RULES.lower() and "by title" in SYSTEM_RULES


def test_prompt_is_rules_then_tagged_chunks_then_question() -> None:
    messages = build_messages("Which index is the default?", PASSAGES)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_RULES
    user = messages[1]["content"]
    for p in PASSAGES:
        assert f"title: {p.title}\nsource_uri: {p.source_uri}\n" in user
        assert p.content in user
    assert user.index("title: Index Types") < user.index("title: VACUUM")
    assert user.rstrip().endswith("Question: Which index is the default?")


def test_a_huge_question_is_cut_to_fit_the_context() -> None:
    messages = build_messages("why " * 50_000, PASSAGES, context_tokens=4096)
    assert len(messages[1]["content"]) < 4096 * 3
    assert "[question truncated]" in messages[1]["content"]


def test_questions_are_cleaned_and_an_empty_one_is_an_error() -> None:
    assert clean_question("a\x00b\x07  c\n") == "a b c"
    question, query = prepare_question("x" * 10_000)
    assert len(question) == 10_000 and len(query) == 2000
    with pytest.raises(PgkbError, match="empty"):
        prepare_question(" \x00\t ")


# --- citation checking ----------------------------------------------------------------------


def test_valid_citations_are_kept() -> None:
    checked = check_citations("B-tree is the default [Index Types].", PASSAGES)
    assert not checked.abstained
    assert checked.answer == "B-tree is the default [Index Types]."
    assert checked.cited_titles == ["Index Types"]
    assert checked.removed_citations == []


def test_citations_match_loosely_but_print_the_exact_title() -> None:
    checked = check_citations(
        "Default is B-tree [index types]; VACUUM frees space [Source: VACUUM].", PASSAGES
    )
    assert checked.cited_titles == ["Index Types", "VACUUM"]
    assert "[Index Types]" in checked.answer and "[VACUUM]" in checked.answer


def test_a_citation_may_name_the_source_uri_or_several_titles() -> None:
    checked = check_citations("Both [/docs/sql-vacuum.html; Index Types].", PASSAGES)
    assert checked.cited_titles == ["VACUUM", "Index Types"]
    assert checked.answer == "Both [VACUUM] [Index Types]."


def test_unknown_citations_are_removed_and_reported() -> None:
    checked = check_citations(
        "B-tree is the default [Index Types] and MySQL agrees [MySQL Manual].", PASSAGES
    )
    assert checked.removed_citations == ["MySQL Manual"]
    assert "MySQL Manual" not in checked.answer
    assert checked.answer == "B-tree is the default [Index Types] and MySQL agrees."
    assert not checked.abstained


def test_a_reply_citing_only_unknown_sources_is_i_dont_know() -> None:
    checked = check_citations("The answer is 42 [Hitchhiker's Guide].", PASSAGES)
    assert checked.abstained
    assert checked.answer == IDK
    assert checked.removed_citations == ["Hitchhiker's Guide"]
    assert checked.note and "treated as" in checked.note


def test_a_reply_without_citations_is_i_dont_know() -> None:
    checked = check_citations("B-tree is the default.", PASSAGES)
    assert checked.abstained and checked.answer == IDK


@pytest.mark.parametrize(
    "reply", ["I don't know", "I don't know.", "i don\u2019t know", '"I do not know"', "", None]
)
def test_i_dont_know_in_its_forms(reply: str | None) -> None:
    assert is_idk(reply)
    checked = check_citations(reply, PASSAGES)
    assert checked.abstained and checked.answer == IDK and checked.note is None


def test_brackets_in_code_and_subscripts_are_not_citations() -> None:
    reply = "Use `CREATE INDEX [ CONCURRENTLY ]` on arr[1] [Index Types].\n```\nSELECT a[2]\n```"
    checked = check_citations(reply, PASSAGES)
    assert checked.removed_citations == []
    assert checked.answer == reply


# --- extractive answers ---------------------------------------------------------------------


def test_extractive_answer_cites_each_passage() -> None:
    text = extractive_answer("default index", PASSAGES)
    assert "[Index Types] (/docs/indexes-types.html)" in text
    assert "[VACUUM] (/docs/sql-vacuum.html)" in text


def test_best_excerpt_picks_the_sentences_about_the_question() -> None:
    filler = "This sentence is about something else entirely. " * 20
    content = filler + "GIN indexes suit jsonb containment queries. " + filler
    excerpt = best_excerpt("Which index serves jsonb containment?", content, max_chars=300)
    assert "GIN indexes suit jsonb containment queries." in excerpt
    assert len(excerpt) <= 310


# --- the chat client ------------------------------------------------------------------------


def _client(fake: FakeOpenAI, **overrides: object) -> ChatClient:
    values = {
        "chat_base_url": fake.base_url,
        "chat_model": "fake-chat",
        "chat_api_key": "sk-test",
        "chat_max_retries": 0,
        "chat_timeout": 5,
        **overrides,
    }
    return ChatClient(load_settings(env={}, **values))


def test_client_sends_model_key_and_messages(fake_openai: FakeOpenAI) -> None:
    fake_openai.script("/v1/chat/completions", chat_reply("hello [Index Types]"))
    reply = _client(fake_openai).complete(build_messages("q", PASSAGES))
    assert reply.content == "hello [Index Types]"
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    assert request.body["model"] == "fake-chat"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["messages"][0]["content"] == SYSTEM_RULES
    assert "stream" not in request.body


def test_client_streams_when_asked(fake_openai: FakeOpenAI) -> None:
    text = "B-tree is the default index type [Index Types]."
    fake_openai.script("/v1/chat/completions", chat_reply(text))
    pieces: list[str] = []
    reply = _client(fake_openai).complete(build_messages("q", PASSAGES), on_text=pieces.append)
    assert reply.content == text
    assert len(pieces) > 1 and "".join(pieces) == text
    assert fake_openai.requests_to("/v1/chat/completions")[0].body["stream"] is True


def test_client_retries_5xx_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        Reply({"error": {"message": "overloaded"}}, status=503, headers={"Retry-After": "0"}),
        chat_reply("ok [VACUUM]"),
    )
    reply = _client(fake_openai, chat_max_retries=2).complete(build_messages("q", PASSAGES))
    assert reply.content == "ok [VACUUM]"
    assert len(fake_openai.requests_to("/v1/chat/completions")) == 2


def test_client_reports_persistent_5xx(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        *[Reply({"error": {"message": "boom"}}, status=500, headers={"Retry-After": "0"})] * 2,
    )
    with pytest.raises(ChatError, match=r"HTTP 500: boom"):
        _client(fake_openai, chat_max_retries=1).complete(build_messages("q", PASSAGES))
    assert len(fake_openai.requests_to("/v1/chat/completions")) == 2


def _retrying_client(fake: FakeOpenAI, retries: int) -> tuple[ChatClient, list[float]]:
    """A client with ``retries`` retries whose waits are recorded instead of slept."""
    sleeps: list[float] = []
    settings = load_settings(
        env={},
        chat_base_url=fake.base_url,
        chat_model="fake-chat",
        chat_api_key="sk-test",
        chat_max_retries=retries,
        chat_timeout=5,
    )
    return ChatClient(settings, sleep=sleeps.append), sleeps


def test_client_retries_429_and_500_with_the_shared_policy_then_succeeds(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "3"}),
        Reply({"error": {"message": "boom"}}, status=500),
        chat_reply("ok [VACUUM]"),
    )
    client, sleeps = _retrying_client(fake_openai, 2)
    assert client._client.max_retries == 0  # the SDK's own retries are off: one policy
    reply = client.complete(build_messages("q", PASSAGES))
    assert reply.content == "ok [VACUUM]"
    assert len(fake_openai.requests_to("/v1/chat/completions")) == 3
    assert sleeps[0] == 3.0  # the server's Retry-After
    assert 0.5 <= sleeps[1] <= 1.0  # then exponential backoff (0.5 s * 2**1, jittered)


def test_client_retries_a_stream_until_it_starts(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        Reply({"error": {"message": "slow down"}}, status=429),
        chat_reply("streamed [VACUUM]"),
    )
    client, sleeps = _retrying_client(fake_openai, 1)
    pieces: list[str] = []
    reply = client.complete(build_messages("q", PASSAGES), on_text=pieces.append)
    assert reply.content == "".join(pieces) == "streamed [VACUUM]"
    assert len(sleeps) == 1 and len(fake_openai.requests_to("/v1/chat/completions")) == 2


def test_client_gives_up_after_the_configured_attempts_naming_the_endpoint(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        *[Reply({"error": {"message": "slow down"}}, status=429)] * 3,
    )
    client, sleeps = _retrying_client(fake_openai, 2)
    with pytest.raises(ChatError) as info:
        client.complete(build_messages("q", PASSAGES))
    assert info.value.message == (
        f"the chat model at {fake_openai.base_url} (model fake-chat) answered HTTP 429: "
        "slow down (gave up after 3 attempts)"
    )
    assert info.value.hint == "check PGKB_CHAT_BASE_URL and that the server is up"
    assert len(fake_openai.requests_to("/v1/chat/completions")) == 3
    assert len(sleeps) == 2


def test_chat_and_embeddings_share_one_retry_policy(fake_openai: FakeOpenAI) -> None:
    """The same failures, the same waits and the same final error text, endpoint aside."""
    from loader.providers.openai_embeddings import OpenAIEmbedder

    failures = [
        Reply({"error": {"message": "busy"}}, status=503, headers={"Retry-After": "2"}),
        Reply({"error": {"message": "busy"}}, status=503, headers={"Retry-After": "2"}),
    ]
    fake_openai.script("/v1/chat/completions", *failures)
    fake_openai.script("/v1/embeddings", *failures)
    chat, chat_sleeps = _retrying_client(fake_openai, 1)
    embed_sleeps: list[float] = []
    embedder = OpenAIEmbedder(
        "fake-embed",
        fake_openai.dims,
        base_url=fake_openai.base_url,
        max_retries=1,
        sleep=embed_sleeps.append,
    )
    with pytest.raises(ChatError) as chat_error:
        chat.complete(build_messages("q", PASSAGES))
    with pytest.raises(PgkbError) as embed_error:
        embedder.embed_query("q")
    assert chat_sleeps == embed_sleeps == [2.0]
    for error, kind, model in (
        (chat_error, "the chat model", "fake-chat"),
        (embed_error, "the embeddings API", "fake-embed"),
    ):
        assert error.value.message == (
            f"{kind} at {fake_openai.base_url} (model {model}) answered HTTP 503: busy "
            "(gave up after 2 attempts)"
        )


def test_client_times_out(fake_openai: FakeOpenAI) -> None:
    """The server answers only after the client gave up (or after 60 s): a client that ignores
    chat_timeout gets the answer and the test fails, however loaded the machine."""
    gave_up = threading.Event()
    fake_openai.script("/v1/chat/completions", Reply(chat_reply("late").body, hold=gave_up))
    try:
        with pytest.raises(ChatError, match=r"did not answer within 0\.5 s"):
            _client(fake_openai, chat_timeout=0.5).complete(build_messages("q", PASSAGES))
    finally:
        gave_up.set()


def test_client_reports_an_unreadable_reply(fake_openai: FakeOpenAI) -> None:
    fake_openai.script("/v1/chat/completions", Reply(raw=b"<html>not json</html>"))
    with pytest.raises(ChatError, match="cannot read"):
        _client(fake_openai).complete(build_messages("q", PASSAGES))


def test_client_reports_an_unreachable_server() -> None:
    settings = load_settings(
        env={},
        chat_base_url="http://127.0.0.1:9/v1",
        chat_model="m",
        chat_max_retries=0,
        chat_timeout=2,
    )
    with pytest.raises(ChatError, match=r"cannot reach the chat model at http://127\.0\.0\.1:9/v1"):
        ChatClient(settings).complete([{"role": "user", "content": "hi"}])


def test_openai_without_a_key_is_a_configuration_error() -> None:
    assert ChatClient.from_settings(load_settings(env={})) is None
    with pytest.raises(ConfigError, match="no chat_api_key"):
        ChatClient(load_settings(env={}, chat_model="gpt-4o-mini"))
    local = ChatClient(
        load_settings(env={}, chat_model="llama3.1", chat_base_url="http://localhost:11434/v1")
    )
    assert local.model == "llama3.1"


def test_a_title_may_be_cited_without_its_section_number() -> None:
    numbered = [Passage(D3, "11.2. Index Types", "/docs/indexes-types.html", 0, "B-tree.")]
    checked = check_citations("B-tree [Index Types].", numbered)
    assert checked.cited_titles == ["11.2. Index Types"]
    assert checked.answer == "B-tree [11.2. Index Types]."
    assert check_citations("B-tree [11.2 Index Types].", numbered).abstained


def test_a_reasoning_scratchpad_is_not_the_answer() -> None:
    reply = "<think>Maybe [Oracle Docs] says so?</think>\nB-tree is the default [Index Types]."
    checked = check_citations(reply, PASSAGES)
    assert checked.answer == "B-tree is the default [Index Types]."
    assert checked.removed_citations == []
    assert check_citations("<think>the chunks say nothing</think>I don't know", PASSAGES).abstained


def test_i_dont_know_with_a_citation_is_still_i_dont_know() -> None:
    checked = check_citations("I don't know [Index Types].", PASSAGES)
    assert checked.abstained and checked.answer == IDK and checked.cited_titles == []
