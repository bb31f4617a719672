"""The reader agent against the fake OpenAI server, on a real database with a hand-made corpus."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from loader.answer.agent import LAST_TURN, run_agent
from loader.answer.prompt import IDK, RULE_IDK, RULE_UNSUPPORTED
from loader.answer.result import Answer
from loader.answer.tools import Toolbox
from loader.app import ask_agent
from loader.providers.chat import ChatClient
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, Reply, Request, chat_reply, tool_call
from tests.helpers import HandEmbedder, chat_settings, load_corpus

QUESTION = "Which index type is the default?"


@pytest.fixture
def corpus(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return load_corpus(conn)


@pytest.fixture
def kb_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return chat_settings(settings, fake_openai)


def agent(
    conn: psycopg.Connection[Any], settings: Settings, question: str = QUESTION, **kw: Any
) -> Answer:
    return run_agent(
        conn, settings, question, embedder=HandEmbedder(), client=ChatClient(settings), **kw
    )


def chats(fake: FakeOpenAI) -> list[Request]:
    return fake.requests_to("/v1/chat/completions")


def tool_results(request: Request) -> list[dict[str, Any]]:
    """The tool messages the agent sent in ``request``, parsed."""
    return [json.loads(m["content"]) for m in request.body["messages"] if m["role"] == "tool"]


def call(name: str, args: dict[str, Any] | str, call_id: str = "call_1") -> Reply:
    return chat_reply(None, [tool_call(name, args, call_id)])


# --- the loop ---------------------------------------------------------------------------------


def test_first_request_has_the_contract_hits_catalogue_and_tools(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    answer = agent(conn, kb_settings)
    (request,) = chats(fake_openai)
    system, user = request.body["messages"]
    assert RULE_IDK in system["content"] and RULE_UNSUPPORTED in system["content"]
    assert "at most 4 turns" in system["content"]
    assert "title: Index Types\nsource_uri: /kb/indexes-types.md" in user["content"]
    assert "Catalogue of matching documents:" in user["content"]
    assert f"document_id: {corpus['Index Types']}" in user["content"]
    names = [t["function"]["name"] for t in request.body["tools"]]
    assert names == ["search_chunks", "read_document", "explore_graph"]
    assert request.body["tool_choice"] == "auto"
    assert answer.mode == "agent" and answer.steps == 1
    assert answer.answer == "B-tree [Index Types]." and answer.citations


def test_a_tool_result_can_be_cited(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        call("search_chunks", {"query": "checkpoint_timeout max_wal_size", "limit": 2}),
        chat_reply("Spread writes with checkpoint_completion_target [Checkpoint Tuning]."),
    )
    answer = agent(conn, kb_settings)
    assert answer.mode == "agent" and answer.steps == 2
    assert answer.answer.endswith("[Checkpoint Tuning].")
    assert {c.title for c in answer.citations} == {"Checkpoint Tuning"}
    assert 2 <= len(answer.citations) <= 3  # at most three passages per cited title
    (result,) = tool_results(chats(fake_openai)[1])
    assert len(result["results"]) == 2
    assert {r["title"] for r in result["results"]} == {"Checkpoint Tuning"}
    # the caller gets the distilled answer, never the transcript
    assert "messages" not in answer.to_json()


def test_the_agent_reports_its_steps(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    """What the MCP ask tool sends as progress notifications."""
    fake_openai.script(
        "/v1/chat/completions",
        call("search_chunks", {"query": "checkpoint_timeout max_wal_size", "limit": 2}),
        chat_reply("Spread writes with checkpoint_completion_target [Checkpoint Tuning]."),
    )
    lines: list[str] = []
    agent(conn, kb_settings, progress=lines.append)
    assert lines == [
        "searching the knowledge base",
        "step 1 of 4: asking the chat model",
        "step 1 of 4: calling search_chunks",
        "step 2 of 4: asking the chat model",
    ]


def test_the_loop_stops_at_the_step_limit(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        *[call("search_chunks", {"query": f"index {i}"}, f"c{i}") for i in range(10)],
    )
    answer = agent(conn, kb_settings.replace(agent_max_steps=3))
    requests = chats(fake_openai)
    assert len(requests) == 3
    assert [r.body["tool_choice"] for r in requests] == ["auto", "auto", "none"]
    assert requests[-1].body["messages"][-1] == {"role": "user", "content": LAST_TURN}
    assert answer.mode == "fallback" and answer.steps == 3
    assert "[Index Types]" in answer.answer  # the hybrid hits are the answer
    assert any("still calling tools" in n for n in answer.notes)


def test_an_uncited_claim_from_a_tool_loop_is_i_dont_know(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions", chat_reply("Hash, says the Oracle manual [Oracle Concepts].")
    )
    answer = agent(conn, kb_settings)
    assert answer.abstained and answer.answer == IDK
    assert answer.removed_citations == ["Oracle Concepts"]


# --- tool arguments ---------------------------------------------------------------------------


def test_malformed_json_arguments_get_an_error_the_model_can_act_on(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        call("search_chunks", '{"query": "gin", '),
        call("search_chunks", '["gin"]'),
        call("drop_table", {"name": "kb.documents"}),
        chat_reply("GIN suits jsonb [Index Types]."),
    )
    answer = agent(conn, kb_settings)
    results = tool_results(chats(fake_openai)[3])
    assert "not valid JSON" in results[0]["error"] and '{"query":' in results[0]["error"]
    assert "must be a JSON object" in results[1]["error"]
    assert "there is no tool 'drop_table'" in results[2]["error"]
    assert answer.mode == "agent" and not answer.abstained


def test_document_ids_are_checked(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(
            None,
            [
                tool_call("search_chunks", {"query": "lock", "document_ids": [unknown]}, "a"),
                tool_call("read_document", {"document_id": "not-a-uuid"}, "b"),
                tool_call("read_document", {"document_id": unknown}, "c"),
                tool_call(
                    "search_chunks",
                    {"query": "lock", "document_ids": [corpus["VACUUM"]], "limit": 50},
                    "d",
                ),
            ],
        ),
        chat_reply("An exclusive lock [VACUUM]."),
    )
    answer = agent(conn, kb_settings)
    unknown_search, bad_uuid, unknown_read, scoped = tool_results(chats(fake_openai)[1])
    assert f"unknown document id(s): {unknown}" in unknown_search["error"]
    assert "is not a document id" in bad_uuid["error"]
    assert f"unknown document id {unknown}" in unknown_read["error"]
    assert {r["title"] for r in scoped["results"]} == {"VACUUM"}
    assert "limit 50 clamped to 10" in scoped["notes"][0]
    assert answer.answer == "An exclusive lock [VACUUM]."


def test_chunk_ranges_are_clamped_or_refused(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    vacuum = corpus["VACUUM"]
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(
            None,
            [
                tool_call(
                    "read_document", {"document_id": vacuum, "chunk_start": 1, "chunk_end": 0}, "a"
                ),
                tool_call("read_document", {"document_id": vacuum, "chunk_start": 7}, "b"),
                tool_call(
                    "read_document",
                    {"document_id": vacuum, "chunk_start": -3, "chunk_end": 99},
                    "c",
                ),
                tool_call("read_document", {"document_id": vacuum, "chunk_start": "x"}, "d"),
            ],
        ),
        chat_reply("It rewrites the table [VACUUM]."),
    )
    agent(conn, kb_settings)
    inverted, past_end, clamped, not_int = tool_results(chats(fake_openai)[1])
    assert "chunk_start 1 is after chunk_end 0" in inverted["error"]
    assert "chunks 0..1" in inverted["error"]
    assert "has 2 chunks (0..1)" in past_end["error"]
    assert clamped["status"] == "chunks"
    assert [c["chunk_index"] for c in clamped["chunks"]] == [0, 1]
    assert clamped["notes"] == [
        "chunk_start -3 clamped to 0",
        "chunk_end 99 clamped to 1 (the document's last chunk)",
    ]
    assert "chunk_start must be an integer" in not_int["error"]


def test_a_repeated_identical_call_is_detected(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    same = {"query": "gin jsonb", "limit": 1}
    fake_openai.script(
        "/v1/chat/completions",
        call("search_chunks", same, "a"),
        call("search_chunks", {"limit": 1, "query": "gin jsonb"}, "b"),
        chat_reply("GIN [Index Types]."),
    )
    answer = agent(conn, kb_settings)
    first, second = tool_results(chats(fake_openai)[2])
    assert first["results"]
    assert "repeated call" in second["error"] and "turn 1" in second["error"]
    assert answer.answer == "GIN [Index Types]."


# --- the budget guard -------------------------------------------------------------------------


def test_reading_a_document_that_does_not_fit_returns_its_outline(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    long_doc = corpus["Checkpoint Tuning"]
    fake_openai.script(
        "/v1/chat/completions",
        call("read_document", {"document_id": long_doc}, "a"),
        call("read_document", {"document_id": long_doc, "chunk_start": 10, "chunk_end": 12}, "b"),
        chat_reply("WAL is recycled after a checkpoint [Checkpoint Tuning]."),
    )
    settings = kb_settings.replace(chat_context_tokens=4096)
    answer = agent(conn, settings, "How does checkpoint tuning spread writes?")
    requests = chats(fake_openai)
    (whole,) = tool_results(requests[1])
    assert whole["status"] == "outline" and "chunks" not in whole
    assert whole["chunk_count"] == 30
    assert [line.split(" (")[0] for line in whole["outline"]] == [
        "0-9: Checkpoint Tuning > Part 1",
        "10-19: Checkpoint Tuning > Part 2",
        "20-29: Checkpoint Tuning > Part 3",
    ]
    assert "does not fit the remaining context budget" in whole["message"]
    # 75% of the 4,096-token window minus what the conversation already used
    budget = int(whole["message"].split("budget of about ")[1].split()[0])
    assert 0 < budget < 0.75 * 4096
    _, ranged = tool_results(requests[2])
    assert ranged["status"] == "chunks"
    assert [c["chunk_index"] for c in ranged["chunks"]] == [10, 11, 12]
    assert answer.mode == "agent"
    assert {c.title for c in answer.citations} == {"Checkpoint Tuning"}
    assert len(answer.citations) <= 3


def test_the_same_document_fits_a_larger_window(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        call("read_document", {"document_id": corpus["Checkpoint Tuning"]}),
        chat_reply("I don't know"),
    )
    agent(
        conn,
        kb_settings.replace(chat_context_tokens=32768),
        "How does checkpoint tuning spread writes?",
    )
    (result,) = tool_results(chats(fake_openai)[1])
    assert result["status"] == "chunks" and len(result["chunks"]) == 30


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [Reply({"error": {"message": "bad gateway"}}, status=502), Reply(delay=3)],
    ids=["5xx", "timeout"],
)
def test_a_model_failure_mid_loop_returns_the_hybrid_hits(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
    failure: Reply,
) -> None:
    fake_openai.script("/v1/chat/completions", call("search_chunks", {"query": "gin"}), failure)
    answer = agent(conn, kb_settings.replace(chat_timeout=1.0))
    assert answer.mode == "fallback" and answer.steps == 2
    assert "[Index Types]" in answer.answer and answer.citations
    assert "showing the hybrid search hits" in answer.notes[0]


def test_weak_retrieval_abstains_before_the_agent_starts(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    answer = agent(conn, kb_settings, "How do I configure Patroni failover for MySQL?")
    assert answer.abstained and answer.mode == "abstained"
    assert chats(fake_openai) == []


# --- the Python entry point -------------------------------------------------------------------


def test_toolbox_refuses_when_the_budget_is_used_up(
    conn: psycopg.Connection[Any], corpus: dict[str, str], kb_settings: Settings
) -> None:
    box = Toolbox(conn, kb_settings, HandEmbedder())
    result = json.loads(box.call("search_chunks", '{"query": "gin"}', step=1, budget=10))
    assert "budget is used up" in result["error"]


def test_ask_agent_for_other_programs(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import loader.app.core

    monkeypatch.setattr(loader.app.core, "get_embedder", lambda settings: HandEmbedder())
    fake_openai.script("/v1/chat/completions", chat_reply("B-tree [Index Types]."))
    result = ask_agent(QUESTION, kb_settings)
    assert result["answer"] == "B-tree [Index Types]."
    assert result["abstained"] is False
    assert result["citations"][0]["title"] == "Index Types"
    assert result["citations"][0]["document_id"] == corpus["Index Types"]
    assert isinstance(result["related_documents"], list)
    # the answer was written from the retrieved passage (the question reached the model with it)
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    prompt = json.dumps(request.body)
    assert "B-tree is the default index type" in prompt and QUESTION in prompt


@pytest.mark.parametrize(
    "question",
    ["index " * 20_000, "nul\x00 index ]] [[ \"'; --", "\U0001f418 index?"],
    ids=["100KB", "nul-and-quotes", "unicode"],
)
def test_any_question_gets_an_agent_answer_not_a_crash(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
    question: str,
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        call("search_chunks", {"query": question[:5000]}),
        chat_reply("B-tree [Index Types]."),
    )
    answer = agent(conn, kb_settings, question)
    assert answer.answer
    for request in chats(fake_openai):
        assert len(json.dumps(request.body)) < kb_settings.chat_context_tokens * 4


def test_an_outline_too_long_for_the_budget_is_cut() -> None:
    from loader.answer.reading import outline_lines as _outline

    records = [
        {"chunk_index": i, "last_chunk_index": i, "heading_path": f"Part {i}", "token_count": 50}
        for i in range(200)
    ]
    lines, left_out = _outline(records, budget=400)
    assert lines[0] == "0: Part 0 (50 tokens)"
    assert 3 <= len(lines) < 200 and left_out == 200 - len(lines)
    assert _outline(records[:5], budget=10) == ([f"{i}: Part {i} (50 tokens)" for i in range(3)], 2)
    assert _outline(records, budget=100_000) == (
        [f"{i}: Part {i} (50 tokens)" for i in range(200)],
        0,
    )


# --- the document graph: explore_graph, the first message's catalogue, the agent's model -------


def relate(conn: psycopg.Connection[Any], source: str, target: str, kind: str) -> None:
    conn.execute(
        "INSERT INTO kb.document_relations (source_id, target_id, relation_type, evidence) "
        "VALUES (%s, %s, %s, 'hand-made')",
        (source, target, kind),
    )
    conn.commit()


def test_the_first_message_carries_the_graph_catalogue_within_the_category(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    relate(conn, corpus["Index Types"], corpus["VACUUM"], "supplements")
    relate(conn, corpus["Index Types"], corpus["Checkpoint Tuning"], "references")
    conn.execute(
        "UPDATE kb.documents SET summary = 'How VACUUM reclaims dead tuples.', "
        "doc_type = 'reference', key_entities = '{VACUUM FULL}' WHERE id = %s",
        (corpus["VACUUM"],),
    )
    conn.commit()
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply("B-tree [Index Types]."),
        chat_reply("B-tree [Index Types]."),
    )
    agent(conn, kb_settings)
    agent(conn, kb_settings, category="manual")
    everything, manual = (r.body["messages"][1]["content"] for r in chats(fake_openai))
    graph = everything.split("Document graph (related documents; explore_graph walks it):\n")[1]
    lines = graph.split("\n\nQuestion:")[0].splitlines()
    assert lines[0].startswith("Catalogue (3 documents")
    number = {t: i for i, line in enumerate(lines) for t in corpus if f"] {t} (" in line}
    assert set(number) == set(corpus)
    vacuum = lines[number["VACUUM"]]
    assert f"(reference; id {corpus['VACUUM']}): How VACUUM reclaims dead tuples." in vacuum
    assert "Entities: VACUUM FULL." in vacuum
    edges = lines[-1]
    assert f"[{number['Index Types']}] supplements [{number['VACUUM']}]" in edges
    assert f"[{number['Index Types']}] references [{number['Checkpoint Tuning']}]" in edges
    # scoped to one category: the other category's document is not in the map, nor its edge
    graph = manual.split("Document graph (related documents; explore_graph walks it):\n")[1]
    assert "Catalogue (2 documents" in graph
    assert "Checkpoint Tuning" not in graph and corpus["Checkpoint Tuning"] not in graph
    assert "supplements" in graph and "references" not in graph


def test_the_graph_tool_walks_the_graph_within_the_category(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    index, vacuum, checkpoint = (
        corpus["Index Types"],
        corpus["VACUUM"],
        corpus["Checkpoint Tuning"],
    )
    relate(conn, index, vacuum, "supplements")
    relate(conn, checkpoint, index, "references")
    script = [
        chat_reply(
            None,
            [
                tool_call("explore_graph", {"document_id": index}, "a"),
                tool_call("explore_graph", {"document_id": checkpoint}, "b"),
                tool_call("explore_graph", {"document_id": vacuum, "depth": 9}, "c"),
                tool_call("explore_graph", {"relation_types": ["likes"]}, "d"),
                tool_call("explore_graph", {"document_id": index, "query": "vacuum"}, "e"),
                tool_call("explore_graph", {"query": "dead tuples"}, "f"),
            ],
        ),
        chat_reply("B-tree [Index Types]."),
    ]
    fake_openai.script("/v1/chat/completions", *script)
    answer = agent(conn, kb_settings, category="manual")
    assert answer.mode == "agent" and answer.answer == "B-tree [Index Types]."
    around, outside, deep, bad_type, both, matching = tool_results(chats(fake_openai)[1])
    assert [(d["title"], d.get("distance")) for d in around["documents"]] == [
        ("Index Types", 0),
        ("VACUUM", 1),
    ]  # Checkpoint Tuning links to Index Types, but it is in another category
    assert around["documents"][1]["path"] == [f"{index} supplements {vacuum}"]
    # another category's document is refused as unknown: the scope hides that it exists
    assert outside["error"].startswith("unknown document id")
    assert [d["title"] for d in deep["documents"]] == ["VACUUM", "Index Types"]
    assert "depth 9 clamped to 3 (1..3)" in deep["notes"]
    assert 'unknown relation type "likes"' in bad_type["error"]
    assert "not both" in both["error"]
    box = Toolbox(conn, kb_settings, HandEmbedder(), category="manual")
    broken = json.loads(box.call("explore_graph", '{"depth": 2', step=1, budget=4000))
    assert (
        "not valid JSON" in broken["error"]
        and '{"document_id": "<id>", "depth": 1}' in (broken["error"])
    )
    assert matching["documents"][0]["title"] == "VACUUM"
    assert "Checkpoint Tuning" not in json.dumps(matching)
    # without a category the same walk reaches the guide
    fake_openai.script(
        "/v1/chat/completions",
        call("explore_graph", {"document_id": index}, "a"),
        chat_reply("B-tree [Index Types]."),
    )
    agent(conn, kb_settings)
    (around,) = tool_results(chats(fake_openai)[-1])
    assert {d["title"] for d in around["documents"]} == {
        "Index Types",
        "VACUUM",
        "Checkpoint Tuning",
    }


def test_the_graph_tool_refuses_a_document_removed_since_it_was_looked_up(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
) -> None:
    vacuum = corpus["VACUUM"]
    box = Toolbox(conn, kb_settings, HandEmbedder(), category="manual")
    first = json.loads(box.call("explore_graph", json.dumps({"document_id": vacuum}), step=1,
                                budget=4000))  # fmt: skip
    assert [d["title"] for d in first["documents"]] == ["VACUUM"]
    conn.execute("DELETE FROM kb.documents WHERE id = %s", (vacuum,))
    conn.commit()
    gone = json.loads(
        box.call("explore_graph", json.dumps({"document_id": vacuum, "depth": 2}), step=2,
                 budget=4000)
    )  # fmt: skip
    assert gone["error"] == (
        f"document {vacuum} is no longer in the knowledge base; use a document_id from the "
        "catalogue or search results"
    )


EXPLORE_GRAPH_SIGNATURE = "kb.explore_graph(uuid, text, integer, text[], jsonb, uuid[], integer)"

FAILING_EXPLORE_GRAPH = """
CREATE FUNCTION kb.explore_graph(
    start_document uuid DEFAULT NULL, query_text text DEFAULT NULL, max_depth integer DEFAULT 1,
    relation_types text[] DEFAULT NULL, filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL, max_results integer DEFAULT 50)
RETURNS TABLE (document_id uuid, title text, source_uri text, category text, doc_type text,
               summary text, key_entities text[], distance integer, path jsonb, edges jsonb)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF max_depth > 1 THEN
        RAISE EXCEPTION 'could not read the graph at depth %', max_depth;
    END IF;
    RETURN QUERY SELECT * FROM kb.explore_graph_real(
        start_document, query_text, max_depth, relation_types, filters, document_ids, max_results);
END
$$;
"""
"""kb.explore_graph failing past one hop (a database error inside the tool), else the real one."""


def test_a_database_error_in_a_tool_is_reported_to_the_model(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
) -> None:
    relate(conn, corpus["Index Types"], corpus["VACUUM"], "supplements")
    conn.execute(f"ALTER FUNCTION {EXPLORE_GRAPH_SIGNATURE} RENAME TO explore_graph_real")
    conn.execute(FAILING_EXPLORE_GRAPH)
    conn.commit()
    doc = corpus["Index Types"]
    fake_openai.script(
        "/v1/chat/completions",
        call("explore_graph", {"document_id": doc, "depth": 2}, "a"),
        call("explore_graph", {"document_id": doc, "depth": 1}, "b"),
        chat_reply("B-tree [Index Types]."),
    )
    answer = agent(conn, kb_settings)
    requests = chats(fake_openai)
    assert len(requests) == 3  # the loop went on after the error
    (failed,) = tool_results(requests[1])
    assert failed == {
        "error": "explore_graph failed in the database: could not read the graph at depth 2"
    }
    _, worked = tool_results(requests[2])
    assert [d["title"] for d in worked["documents"]] == ["Index Types", "VACUUM"]
    assert answer.mode == "agent" and answer.answer == "B-tree [Index Types]."


def test_the_agent_uses_agent_chat_model_falling_back_to_chat_model(
    conn: psycopg.Connection[Any],
    corpus: dict[str, str],
    kb_settings: Settings,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import loader.app.core
    from loader.app import AskRequest, KnowledgeBase

    monkeypatch.setattr(loader.app.core, "get_embedder", lambda settings: HandEmbedder())
    fake_openai.script(
        "/v1/chat/completions",
        call("search_chunks", {"query": "gin"}),
        *[chat_reply("B-tree [Index Types].")] * 3,
    )
    cheap = kb_settings.replace(agent_chat_model="fake-small")
    assert ask_agent(QUESTION, cheap)["answer"] == "B-tree [Index Types]."
    KnowledgeBase(cheap).ask(AskRequest(QUESTION))  # the single-shot answer keeps chat_model
    ask_agent(QUESTION, kb_settings)  # no agent_chat_model: chat_model
    assert [r.body["model"] for r in chats(fake_openai)] == [
        "fake-small",
        "fake-small",
        "fake-chat",
        "fake-chat",
    ]
