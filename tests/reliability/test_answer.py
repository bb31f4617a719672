"""Defects 4 and 6 of issue 12, on the answer side (loader/answer/, loader/providers/chat.py).

Defect 4: the category is a boundary. ``pgkb ask --category X`` listed related documents of other
categories, and a chunk telling the agent to ``read_document`` another category's document got
that text read (and citable). Every tool and the related-documents query now honour the
question's scope; ``ask`` and the agent read over a read-only connection.

Defect 6 (the streaming half): a connection dropped mid-stream escaped as a traceback, and
``chat_timeout`` bounds each read, not the request, so a server trickling tokens held ``pgkb ask``
for as long as it liked. ``chat_deadline`` bounds the whole request; both end in the extractive
fallback with a note saying why.

All against the fake OpenAI server on a real database with the hand-made corpus (categories:
"manual" for Index Types and VACUUM, "guide" for Checkpoint Tuning).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

from loader.answer.agent import run_agent
from loader.answer.single import answer_question
from loader.answer.tools import Toolbox
from loader.providers.chat import ChatClient
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, Reply, chat_reply, tool_call
from tests.helpers import HandEmbedder, chat_settings, load_corpus


@pytest.fixture
def corpus(conn: psycopg.Connection[Any]) -> dict[str, str]:
    ids = load_corpus(conn)
    # the graph links a manual page to the guide (another category)
    conn.execute(
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type) "
        "VALUES (%s, %s, 'references')",
        (ids["Index Types"], ids["Checkpoint Tuning"]),
    )
    conn.commit()
    return ids


@pytest.fixture
def kb_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return chat_settings(settings, fake_openai)


# --- defect 4: the category is a boundary ----------------------------------------------------


def test_related_documents_stay_inside_the_category(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    unscoped = answer_question(
        conn,
        kb_settings,
        "Which index type is the default?",
        embedder=HandEmbedder(),
        client=ChatClient(kb_settings),
    )
    assert "Checkpoint Tuning" in {d.title for d in unscoped.related_documents}  # the edge works
    for client in (ChatClient(kb_settings), None):  # model answer, and the extractive one
        fake_openai.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
        answer = answer_question(
            conn,
            kb_settings,
            "Which index type is the default?",
            embedder=HandEmbedder(),
            client=client,
            category="manual",
        )
        assert answer.citations
        titles = {d.title for d in answer.related_documents}
        assert "Checkpoint Tuning" not in titles, answer.related_documents


def test_the_agent_cannot_read_or_cite_another_categorys_document(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    """A chunk (or the model) names a document of another category: read_document refuses it as
    unknown, search_chunks inside it finds nothing, and its text is never cited."""
    guide = corpus["Checkpoint Tuning"]
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(None, [tool_call("read_document", {"document_id": guide, "chunk_end": 1})]),
        chat_reply(
            None,
            [tool_call("search_chunks", {"query": "checkpoint", "document_ids": [guide]})],
        ),
        chat_reply("Checkpoints flush dirty buffers [Checkpoint Tuning]."),
    )
    answer = run_agent(
        conn,
        kb_settings,
        "Which index type is the default?",
        embedder=HandEmbedder(),
        client=ChatClient(kb_settings),
        category="manual",
    )
    requests = fake_openai.requests_to("/v1/chat/completions")
    tool_messages = [
        json.loads(m["content"]) for m in requests[-1].body["messages"] if m["role"] == "tool"
    ]
    assert len(tool_messages) == 2
    for result in tool_messages:
        assert "error" in result, result
        assert "Checkpoint section" not in json.dumps(result)
    assert "Checkpoint Tuning" not in {p.title for p in answer.citations}
    assert answer.removed_citations == ["Checkpoint Tuning"]

    box = Toolbox(conn, kb_settings, HandEmbedder(), category="manual")
    guide_id = uuid.UUID(guide)
    assert box.documents([guide_id]) == {}
    unscoped = Toolbox(conn, kb_settings, HandEmbedder())
    # without a category every document is readable
    assert guide_id in unscoped.documents([guide_id])


def test_ask_reads_over_a_read_only_connection(
    conn: psycopg.Connection[Any], corpus: dict[str, str], kb_settings: Settings
) -> None:
    from loader.db.session import reader_connection

    with reader_connection(kb_settings) as reader:
        assert reader.execute("SHOW transaction_read_only").fetchone() == ("on",)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            reader.execute("DELETE FROM kb.documents")
        # and in an explicit transaction too
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), reader.transaction():
            reader.execute("CREATE TABLE kb.planted (x int)")
    assert conn.execute("SELECT count(*) FROM kb.documents").fetchone() == (3,)


# --- defect 6: streams dropped, servers that trickle ----------------------------------------


def test_a_stream_dropped_midway_falls_back_to_the_passages(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    reply = chat_reply("VACUUM reclaims storage occupied by dead tuples [VACUUM].")
    reply.drop_after = 2
    fake_openai.script("/v1/chat/completions", reply)
    pieces: list[str] = []
    answer = answer_question(
        conn,
        kb_settings,
        "What does VACUUM reclaim?",
        embedder=HandEmbedder(),
        client=ChatClient(kb_settings),
        on_text=pieces.append,
    )
    assert pieces  # the start of the reply was shown
    assert answer.mode == "fallback" and answer.citations
    assert any("was lost mid-reply" in note for note in answer.notes), answer.notes


def _trickling(reply: Reply, seconds: float) -> Reply:
    reply.trickle = seconds
    return reply


def test_a_trickling_stream_is_cut_at_the_deadline(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    """Each piece arrives well within chat_timeout; the whole reply would take 12 s."""
    text = "VACUUM reclaims storage occupied by dead tuples [VACUUM]. " * 2  # 15 pieces
    fake_openai.script("/v1/chat/completions", _trickling(chat_reply(text), 0.8))
    settings = kb_settings.replace(chat_deadline=1.5)
    answer = answer_question(
        conn,
        settings,
        "What does VACUUM reclaim?",
        embedder=HandEmbedder(),
        client=ChatClient(settings),
        on_text=lambda _piece: None,
    )
    assert answer.mode == "fallback" and answer.citations
    assert any("chat_deadline" in note for note in answer.notes), answer.notes


def test_a_trickling_plain_reply_is_cut_at_the_deadline(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    """Not streamed (the agent, ``--json``): the body arrives a byte every 0.05 s (about 15 s)."""
    fake_openai.script(
        "/v1/chat/completions", _trickling(chat_reply("B-tree [Index Types]."), 0.05)
    )
    settings = kb_settings.replace(chat_deadline=1.5)
    answer = run_agent(
        conn,
        settings,
        "Which index type is the default?",
        embedder=HandEmbedder(),
        client=ChatClient(settings),
    )
    assert answer.mode == "fallback" and answer.citations
    assert any("chat_deadline" in note for note in answer.notes), answer.notes


def test_chat_deadline_must_be_positive(settings: Settings) -> None:
    from loader.errors import ConfigError

    with pytest.raises(ConfigError, match="chat_deadline"):
        settings.replace(chat_deadline=0).validate()
