"""The reader agent: a short, isolated tool loop for questions that need more than five snippets.

:func:`run_agent` (``pgkb ask --agent``, and :func:`loader.app.ask_agent` for other
programs) starts from
the shared retrieval step (:func:`loader.answer.retrieval.retrieve`, with a wider first search
for a short catalogue of the documents it matched), adds the document graph's catalogue of up
to 15 documents relevant to the question (:func:`loader.graph.catalogue.catalogue_for_question`:
summaries, types, entities and the edges among them, within the question's category), then
lets the chat model call the tools of :mod:`loader.answer.tools` for at most
``agent_max_steps`` model calls (default 4). The caller
receives only the distilled answer, its citations (checked against every chunk the agent saw)
and related documents, never the transcript. A model or network failure returns the hybrid hits
as the answer instead of failing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from loader import telemetry
from loader.answer.citations import check_citations
from loader.answer.context import fetch_neighbours
from loader.answer.passages import Passage, estimate_tokens
from loader.answer.prompt import (
    IDK,
    SYSTEM_RULES,
    fit_passages,
    format_passage,
    messages_tokens,
    truncate_question,
)
from loader.answer.result import Answer, checked_answer, fallback_answer, record
from loader.answer.retrieval import Gate, QueryEmbedder, Retrieval, gate_record, retrieve, settle
from loader.answer.tools import (
    CATALOGUE_CANDIDATES,
    CATALOGUE_SIZE,
    FIRST_MESSAGE_SHARE,
    GRAPH_CATALOGUE_SHARE,
    READ_BUDGET_SHARE,
    Toolbox,
)
from loader.filters import SearchFilters
from loader.graph.catalogue import catalogue_for_question, format_catalogue
from loader.providers.chat import ChatError, ChatModel
from loader.settings import Settings

log = logging.getLogger(__name__)

AGENT_RULES = (
    SYSTEM_RULES
    + """

You are the reader agent of a knowledge base. The user's message holds the first search results
and a catalogue of matching documents. If they do not answer the question, call the tools to find
more: search_chunks (search again, with other words or inside given documents), read_document
(read a document or a range of its chunks; when it is too long you get its outline, then ask for
a chunk range), explore_graph (the documents linked to or from a document, or matching words,
with their summaries). Chunks returned by tools count as chunks: cite them by title too.
You have at most <steps> turns in all, including your final answer; each turn may call several
tools. Do not repeat a call you already made. When you have the evidence, answer."""
)

LAST_TURN = (
    "This is your last turn: no more tool calls. Answer now from the chunks above, citing their "
    f'titles, or answer exactly "{IDK}".'
)


# --- the loop -----------------------------------------------------------------------------


def catalogue(passages: Sequence[Passage], toolbox: Toolbox) -> list[dict[str, Any]]:
    """The documents the first search matched, best first, with their size."""
    order: dict[uuid.UUID, list[Passage]] = {}
    for passage in passages:
        order.setdefault(passage.document_id, []).append(passage)
    ids = list(order)[:CATALOGUE_SIZE]
    infos = toolbox.documents(ids)
    entries = []
    for doc_id in ids:
        info = infos.get(doc_id)
        hits = order[doc_id]
        entries.append(
            {
                "document_id": str(doc_id),
                "title": hits[0].title,
                "source_uri": hits[0].source_uri,
                "chunk_count": info.chunk_count if info else None,
                "matching_chunks": sorted({p.chunk_index for p in hits}),
            }
        )
    return entries


def graph_catalogue(
    conn: psycopg.Connection[Any], query_text: str, category: str | None, budget: int
) -> str:
    """The document graph's catalogue for the question (up to 15 documents with summaries,
    types, entities and the edges among them), cut to ``budget`` tokens; "" when the graph
    cannot be read (the agent works without it)."""
    try:
        nodes = catalogue_for_question(
            conn, query_text, filters={"category": category} if category else None
        )
    except psycopg.Error as exc:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.rollback()
        log.warning("reader agent: no graph catalogue: %s", exc)
        return ""
    text = format_catalogue(nodes)
    while nodes and estimate_tokens(text) > budget:
        nodes = nodes[:-1]
        text = format_catalogue(nodes)
    return text if nodes else ""


def first_message(
    question: str,
    passages: Sequence[Passage],
    entries: Sequence[Mapping[str, Any]],
    ctx: int,
    graph: str = "",
) -> str:
    blocks = []
    for passage in passages:
        blocks.append(
            f"--- chunk ---\ndocument_id: {passage.document_id}\n{format_passage(passage)}"
        )
    lines = [
        f"- {e['title']} | document_id: {e['document_id']} | source_uri: {e['source_uri']} | "
        f"chunks: {e['chunk_count']} | matching chunks: "
        + ", ".join(str(i) for i in e["matching_chunks"])
        for e in entries
    ]
    return (
        "First search results (hybrid search for the question):\n\n"
        + "\n\n".join(blocks)
        + "\n\n--- end of chunks ---\n\nCatalogue of matching documents:\n"
        + "\n".join(lines)
        + (
            f"\n\nDocument graph (related documents; explore_graph walks it):\n{graph}"
            if graph
            else ""
        )
        + f"\n\nQuestion: {truncate_question(question, ctx // 4)}"
    )


def run_agent(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    *,
    embedder: QueryEmbedder,
    client: ChatModel | None,
    category: str | None = None,
    gate: Gate | None = None,
    filters: SearchFilters | None = None,
    progress: Callable[[str], None] | None = None,
) -> Answer:
    """Answer ``question`` with the reader agent; never raises for model or network failures.

    Abstains before any model call when the abstention gate says so (as ``pgkb ask`` does);
    with no chat model configured the answer is extractive, as for ``pgkb ask``. ``progress``
    receives a line per stage: the first search, then each model call and the tools it called.
    """
    with telemetry.span("pgkb.ask", agent=True) as span:
        if progress:
            progress("searching the knowledge base")
        found = retrieve(
            conn,
            settings,
            question,
            embedder=embedder,
            category=category,
            gate=gate,
            limit=max(CATALOGUE_CANDIDATES, settings.match_count),
            filters=filters,
        )
        answer = settle(found, client)
        if answer is None:
            assert client is not None  # settle answers when there is no client
            answer = _loop(conn, settings, found, embedder, client, category, progress)
        answer.notes[:0] = found.notes
        if answer.abstention is None:  # the gate let it through: say what it saw all the same
            answer.abstention = gate_record(found)
        record(answer)
        span.set(mode=answer.mode, abstained=answer.abstained, steps=answer.steps)
    return answer


def _loop(
    conn: psycopg.Connection[Any],
    settings: Settings,
    found: Retrieval,
    embedder: QueryEmbedder,
    client: ChatModel,
    category: str | None,
    progress: Callable[[str], None] | None = None,
) -> Answer:
    question, passages, wide = found.question, found.passages, found.candidates
    toolbox = Toolbox(conn, settings, embedder, category=category, filters=found.filters)
    toolbox.remember(passages)
    tools = toolbox.tools()
    system = AGENT_RULES.replace("<steps>", str(settings.agent_max_steps))
    entries = catalogue(wide, toolbox)
    shown = fit_passages(passages, int(settings.chat_context_tokens * FIRST_MESSAGE_SHARE))
    graph = graph_catalogue(
        conn,
        found.query_text,
        category,
        int(settings.chat_context_tokens * GRAPH_CATALOGUE_SHARE),
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": first_message(question, shown, entries, settings.chat_context_tokens, graph),
        },
    ]
    tools_tokens = estimate_tokens(json.dumps(tools))
    read_limit = int(settings.chat_context_tokens * READ_BUDGET_SHARE)
    notes: list[str] = []

    for step in range(1, settings.agent_max_steps + 1):
        last = step == settings.agent_max_steps
        if last and step > 1:
            messages.append({"role": "user", "content": LAST_TURN})
        if progress:
            progress(f"step {step} of {settings.agent_max_steps}: asking the chat model")
        try:
            reply = client.complete(messages, tools=tools, tool_choice="none" if last else "auto")
        except ChatError as exc:
            log.warning("reader agent: chat model failed at step %d: %s", step, exc.message)
            return fallback_answer(
                question,
                passages,
                mode="fallback",
                neighbours=found.neighbours,
                notes=[f"{exc.message}; showing the hybrid search hits instead"],
                steps=step,
            )
        if reply.tool_calls and not last:
            messages.append(reply.assistant_message())
            if progress:
                names = ", ".join(call.name for call in reply.tool_calls)
                progress(f"step {step} of {settings.agent_max_steps}: calling {names}")
            for call in reply.tool_calls:
                used = messages_tokens(messages) + tools_tokens
                result = toolbox.call(
                    call.name, call.arguments, step=step, budget=read_limit - used
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            continue
        if reply.tool_calls and not (reply.content or "").strip():
            notes.append(
                f"the agent was still calling tools after {step} model calls "
                f"(agent_max_steps = {settings.agent_max_steps})"
            )
            break
        seen = list(toolbox.seen.values())
        checked = check_citations(reply.content, seen)
        # the documents the agent read with its tools: their neighbours too, before the answer
        neighbours = {
            **found.neighbours,
            **fetch_neighbours(conn, seen, category=category, known=found.neighbours),
        }
        answer = checked_answer(
            question,
            reply.content,
            checked,
            seen,
            wide,
            neighbours=neighbours,
            steps=step,
            mode="agent",
        )
        answer.context = list(passages)
        return answer

    return fallback_answer(
        question,
        passages,
        mode="fallback",
        neighbours=found.neighbours,
        notes=[*notes, "no final answer from the agent; showing the hybrid search hits instead"],
        steps=settings.agent_max_steps,
    )
