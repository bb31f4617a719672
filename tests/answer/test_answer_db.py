"""``answer_question`` on a real database with a small hand-made corpus and hand-made vectors.

The corpus is three documents written into the kb tables with 4-dimensional vectors; the query
"embedder" maps a question to one of those directions by its words, so the vector leg is exact
and the keyword leg is PostgreSQL's own. The chat model is the fake OpenAI server.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from loader.answer.prompt import IDK, RULE_IDK, RULE_UNSUPPORTED, SYSTEM_RULES
from loader.answer.result import Answer
from loader.answer.single import answer_question
from loader.providers.chat import ChatClient
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, Reply, chat_reply
from tests.helpers import MODEL, HandEmbedder, chat_settings, load_corpus


@pytest.fixture
def corpus(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return load_corpus(conn)


@pytest.fixture
def kb_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return chat_settings(settings, fake_openai)


def ask(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    *,
    model: bool = True,
    **kwargs: Any,
) -> Answer:
    client = ChatClient(settings) if model else None
    return answer_question(
        conn, settings, question, embedder=HandEmbedder(), client=client, **kwargs
    )


def chat_requests(fake: FakeOpenAI) -> list[Any]:
    return fake.requests_to("/v1/chat/completions")


# --- the prompt contract ----------------------------------------------------------------------


def test_the_request_carries_the_contract(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    answer = ask(conn, kb_settings, "Which index type is the default?")
    (request,) = chat_requests(fake_openai)
    system, user = request.body["messages"]
    assert system == {"role": "system", "content": SYSTEM_RULES}
    assert RULE_IDK in system["content"] and RULE_UNSUPPORTED in system["content"]
    assert request.body["model"] == "fake-chat"
    # every chunk given to the model is tagged with its title and source_uri
    assert answer.context
    assert user["content"].count("--- chunk ---") == len(answer.context)
    for passage in answer.context:
        assert f"title: {passage.title}\nsource_uri: {passage.source_uri}\n" in user["content"]
        assert passage.content.strip() in user["content"]
    assert user["content"].rstrip().endswith("Question: Which index type is the default?")
    assert answer.answer == "B-tree [Index Types]." and not answer.abstained
    assert answer.mode == "model"
    assert {c.title for c in answer.citations} == {"Index Types"}
    cited = answer.to_json()["citations"][0]
    assert set(cited) >= {"title", "source_uri", "document_id", "chunk_index", "content", "score"}
    assert cited["document_id"] == corpus["Index Types"]


def test_neighbours_are_merged_into_the_best_hits(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    answer = ask(conn, kb_settings, "Which index type is the default?")
    index_passages = [p for p in answer.context if p.title == "Index Types"]
    # the three Index Types chunks are hits or neighbours of hits: one passage, no repetition
    assert len(index_passages) == 1
    (passage,) = index_passages
    assert (passage.chunk_index, passage.chunk_end) == (0, 2)
    assert passage.content.count("B-tree is the default index type") == 1


def test_category_limits_retrieval(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    answer = ask(conn, kb_settings, "index types and vacuum", model=False, category="guide")
    assert {p.title for p in answer.context} == {"Checkpoint Tuning"}


# --- checking the reply -----------------------------------------------------------------------


def test_a_citation_of_an_unretrieved_title_is_removed_and_reported(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply("B-tree is the default [Index Types], as in MySQL [MySQL Reference Manual]."),
    )
    answer = ask(conn, kb_settings, "Which index type is the default?")
    assert answer.answer == "B-tree is the default [Index Types], as in MySQL."
    assert answer.removed_citations == ["MySQL Reference Manual"]
    assert any("MySQL Reference Manual" in n for n in answer.notes)
    assert [c.title for c in answer.citations] == ["Index Types"]
    assert answer.model_reply is not None and "MySQL Reference Manual" in answer.model_reply
    assert answer.to_json()["removed_citations"] == ["MySQL Reference Manual"]


def test_an_uncited_reply_is_i_dont_know(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("/v1/chat/completions", chat_reply("B-tree is the default."))
    answer = ask(conn, kb_settings, "Which index type is the default?")
    assert answer.answer == IDK and answer.abstained
    assert answer.citations == []
    assert answer.model_reply == "B-tree is the default."


def test_the_model_saying_i_dont_know_abstains(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("/v1/chat/completions", chat_reply("I don't know."))
    answer = ask(conn, kb_settings, "Which index type is the default?")
    assert answer.abstained and answer.answer == IDK and answer.mode == "model"
    assert answer.related_documents  # the closest sources are still shown


# --- abstention before any model call ---------------------------------------------------------


def test_weak_retrieval_abstains_before_any_request(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    answer = ask(conn, kb_settings, "How does MySQL handle replication lag with Galera?")
    assert answer.abstained and answer.answer == IDK and answer.mode == "abstained"
    assert chat_requests(fake_openai) == []
    assert answer.abstention is not None and "MySQL" in answer.abstention["reason"]
    assert answer.related_documents, "the closest sources found are listed"
    data = answer.to_json()
    assert data["abstained"] is True and data["citations"] == []


def test_an_empty_knowledge_base_abstains(
    conn: psycopg.Connection[Any], kb_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    conn.execute("SELECT kb.register_model(%s, 4, 'test')", (MODEL,))
    conn.commit()
    answer = ask(conn, kb_settings, "Which index type is the default?")
    assert answer.abstained and answer.related_documents == []
    assert chat_requests(fake_openai) == []


# --- no model, failing model ------------------------------------------------------------------


def test_without_a_model_the_answer_is_the_cited_passages(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    settings = kb_settings.replace()  # same settings, but no client below
    answer = ask(conn, settings, "Which index type is the default?", model=False)
    assert answer.mode == "extractive" and not answer.abstained
    assert "[Index Types] (/kb/indexes-types.md)" in answer.answer
    assert "B-tree is the default index type" in answer.answer
    assert answer.citations and answer.citations[0].title == "Index Types"
    assert answer.hint and "PGKB_CHAT_MODEL" in answer.hint
    assert chat_requests(fake_openai) == []


@pytest.mark.parametrize(
    "failure",
    [
        Reply({"error": {"message": "upstream exploded"}}, status=502),
        Reply(chat_reply("late").body, delay=3),
        Reply(raw=b"{not json"),
    ],
    ids=["5xx", "timeout", "malformed"],
)
def test_a_failing_model_falls_back_to_the_passages(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
    failure: Reply,
) -> None:
    fake_openai.script("/v1/chat/completions", failure)
    settings = kb_settings.replace(chat_timeout=1.0)
    answer = ask(conn, settings, "Which index type is the default?")
    assert answer.mode == "fallback" and not answer.abstained
    assert "[Index Types]" in answer.answer
    assert answer.notes and "showing the retrieved passages" in answer.notes[0]
    assert len(chat_requests(fake_openai)) == 1


def test_streaming_passes_the_raw_reply_then_checks_it(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions", chat_reply("Dead tuples [VACUUM] and more [Postgres Wiki].")
    )
    pieces: list[str] = []
    answer = ask(conn, kb_settings, "What does VACUUM reclaim?", on_text=pieces.append)
    assert "".join(pieces) == "Dead tuples [VACUUM] and more [Postgres Wiki]."
    assert answer.answer == "Dead tuples [VACUUM] and more."
    assert chat_requests(fake_openai)[0].body["stream"] is True


# --- any question -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "index " * 20_000,
        "'; DROP TABLE kb.documents; --",
        'unbalanced "quote about vacuum',
        "nul\x00byte in the index question",
        "!!! ??? ...",
        "the of and a",
        "\U0001f418 \u7d22\u5f15\u306e\u7a2e\u985e",
        "-- vacuum",
    ],
    ids=["100KB", "sql", "quote", "nul", "punctuation", "stopwords", "unicode", "comment"],
)
def test_any_question_gets_an_answer_not_a_crash(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
    question: str,
) -> None:
    answer = ask(conn, kb_settings, question)
    assert answer.answer
    assert answer.mode in ("model", "abstained")
    assert conn.execute("SELECT count(*) FROM kb.documents").fetchone() == (3,)
    for request in chat_requests(fake_openai):
        assert len(request.body["messages"][1]["content"]) < kb_settings.chat_context_tokens * 3


def test_graph_neighbours_of_cited_documents_are_related(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    conn.execute(
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type) "
        "VALUES (%s, %s, 'supplements')",
        (corpus["VACUUM"], corpus["Index Types"]),
    )
    conn.commit()
    fake_openai.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    answer = ask(conn, kb_settings, "Which index type is the default?")
    related = {d.title: d.relation for d in answer.related_documents}
    assert related["VACUUM"] == "supplements"
    assert "Index Types" not in related  # cited, so not listed again


def test_graph_neighbours_stay_within_the_category(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    for target, kind in (("VACUUM", "supplements"), ("Checkpoint Tuning", "supersedes")):
        conn.execute(
            "INSERT INTO kb.document_relations (source_id, target_id, relation_type) "
            "VALUES (%s, %s, %s)",
            (corpus["Index Types"], corpus[target], kind),
        )
    conn.commit()
    fake_openai.script("/v1/chat/completions", *[chat_reply("B-tree [Index Types].")] * 2)
    everything = ask(conn, kb_settings, "Which index type is the default?")
    related = {d.title: d.relation for d in everything.related_documents}
    assert related == {"VACUUM": "supplements", "Checkpoint Tuning": "retrieved"}
    manual = ask(conn, kb_settings, "Which index type is the default?", category="manual")
    related = {d.title: d.relation for d in manual.related_documents}
    # the graph's edge to the guide is not followed outside the question's category
    assert "Checkpoint Tuning" not in related and related["VACUUM"] in ("supplements", "retrieved")


def test_overlapping_neighbour_windows_become_one_passage_without_repeats(
    conn: psycopg.Connection[Any], corpus: dict[str, str]
) -> None:
    from loader.answer.context import expand_with_neighbours
    from loader.answer.passages import Passage

    rows = conn.execute(
        "SELECT id, chunk_index, content FROM kb.chunks WHERE document_id = %s "
        "AND chunk_index IN (1, 3, 9) ORDER BY chunk_index",
        (corpus["Checkpoint Tuning"],),
    ).fetchall()
    doc = uuid.UUID(corpus["Checkpoint Tuning"])
    hits = [Passage(doc, "Checkpoint Tuning", "/kb/c.md", i, c, 0.1, cid) for cid, i, c in rows]
    (window, separate) = expand_with_neighbours(conn, [hits[1], hits[0], hits[2]], 10_000)
    # chunk 3 -> 2..4, chunk 1 -> 0..2: they overlap, so one passage 0..4, each chunk once
    assert (window.chunk_index, window.chunk_end) == (0, 4)
    for i in range(5):
        assert window.content.count(f"Checkpoint section {i}:") == 1
    assert "Checkpoint section 5:" not in window.content
    assert window.score == 0.1 and window.chunk_id == rows[1][0]
    # chunk 9, the third hit, is expanded on its own
    assert (separate.chunk_index, separate.chunk_end) == (8, 10)
    # a tight budget keeps the hits as they are
    tight = expand_with_neighbours(conn, hits, budget_tokens=1)
    assert [(p.chunk_index, p.chunk_end) for p in tight] == [(1, None), (3, None), (9, None)]
