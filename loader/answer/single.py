"""The single-shot answer (``pgkb ask``): one retrieval, one model call, citations checked.

The answer contract (SPEC point 6), in the order :func:`answer_question` applies it:

1. **Retrieve**: hybrid search, top ``match_count`` (5), optionally within a category
   (:func:`loader.answer.retrieval.retrieve`).
2. **Abstain before any model call** when the abstention gate (:mod:`loader.answer.abstention`,
   thresholds calibrated by the eval) says retrieval found nothing that answers: the answer is
   "I don't know" with the closest sources found.
3. **Prompt** = :data:`~loader.answer.prompt.SYSTEM_RULES` + the retrieved chunks, each tagged
   with its title and ``source_uri`` (neighbouring chunks merged in while the context budget
   allows) + the question.
4. **Call the chat model** (any OpenAI-compatible endpoint,
   :class:`~loader.providers.chat.ChatClient`): timeouts, retries with backoff, streaming to the
   terminal when interactive.
5. **Check the reply** (:func:`~loader.answer.citations.check_citations`): a citation is a
   retrieved title in square brackets; a bracket naming anything else is removed from the
   answer and reported; a reply that cites no retrieved title is treated as "I don't know".

With no chat model configured, or when the model or the network fails, the answer is
extractive: the best passages themselves, each with its title and source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from loader import telemetry
from loader.answer.citations import check_citations
from loader.answer.context import expand_with_neighbours
from loader.answer.passages import estimate_tokens
from loader.answer.prompt import (
    ANSWER_RESERVE_TOKENS,
    SYSTEM_RULES,
    build_messages,
    fit_passages,
    truncate_question,
)
from loader.answer.result import Answer, checked_answer, fallback_answer, record
from loader.answer.retrieval import Gate, QueryEmbedder, Retrieval, gate_record, retrieve, settle
from loader.answer.stream import CheckedStream
from loader.filters import SearchFilters
from loader.providers.chat import ChatError, ChatModel
from loader.settings import Settings

log = logging.getLogger(__name__)


def answer_question(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    *,
    embedder: QueryEmbedder,
    client: ChatModel | None = None,
    category: str | None = None,
    on_text: Callable[[str], None] | None = None,
    gate: Gate | None = None,
    filters: SearchFilters | None = None,
    on_checked_text: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Answer:
    """Answer ``question`` from the knowledge base, with citations or "I don't know".

    ``client`` None means no chat model: the answer is extractive. ``on_text`` receives the
    model's reply as it streams (before it is checked); ``on_checked_text`` receives it as it
    streams too, but only as far as the citation check lets it through
    (:class:`loader.answer.stream.CheckedStream`: what it receives is the answer returned,
    or, when the final check changed it, that text followed by a correction). ``progress``
    receives a line per stage (retrieval, model call). Model and network failures never
    raise: the answer falls back to the retrieved passages, with a note saying why. ``filters``
    (source, metadata) narrow the search on top of ``category``.
    """
    with telemetry.span("pgkb.ask", agent=False) as span:
        if progress:
            progress("searching the knowledge base")
        found = retrieve(
            conn,
            settings,
            question,
            embedder=embedder,
            category=category,
            gate=gate,
            filters=filters,
        )
        answer = settle(found, client)
        if answer is None:
            assert client is not None  # settle answers when there is no client
            if progress:
                progress(f"asking the chat model ({len(found.passages)} passages)")
            answer = _model_answer(conn, settings, found, client, on_text, on_checked_text)
        answer.notes[:0] = found.notes
        if answer.abstention is None:  # the gate let it through: say what it saw all the same
            answer.abstention = gate_record(found)
        record(answer)
        span.set(mode=answer.mode, abstained=answer.abstained, citations=len(answer.citations))
    return answer


def _model_answer(
    conn: psycopg.Connection[Any],
    settings: Settings,
    found: Retrieval,
    client: ChatModel,
    on_text: Callable[[str], None] | None,
    on_checked_text: Callable[[str], None] | None = None,
) -> Answer:
    question, passages = found.question, found.passages
    budget = settings.chat_context_tokens - ANSWER_RESERVE_TOKENS - estimate_tokens(SYSTEM_RULES)
    budget -= estimate_tokens(truncate_question(question, settings.chat_context_tokens // 4))
    context = expand_with_neighbours(conn, passages, budget // 2)
    context = fit_passages(context, budget)

    messages = build_messages(question, context, context_tokens=settings.chat_context_tokens)
    stream = CheckedStream(context, on_checked_text) if on_checked_text else None
    sink = on_text
    if stream is not None:

        def sink(piece: str) -> None:
            if on_text is not None:
                on_text(piece)
            stream.feed(piece)

    try:
        reply = client.complete(messages, on_text=sink)
    except ChatError as exc:
        log.warning("chat model failed: %s", exc.message)
        answer = fallback_answer(
            question,
            passages,
            mode="fallback",
            neighbours=found.neighbours,
            notes=[f"{exc.message}; showing the retrieved passages instead"],
            steps=1,
        )
        if stream is not None:
            stream.finish(answer.answer)
        return answer
    checked = check_citations(reply.content, context)
    answer = checked_answer(
        question, reply.content, checked, context, passages, neighbours=found.neighbours, steps=1
    )
    if stream is not None:
        stream.finish(answer.answer)
    return answer
