"""Asking from outside: the setup ``pgkb ask`` and :func:`ask_agent` share (the embedder, the
chat client, a read-only connection), then the single-shot answer or the reader agent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from loader.answer.agent import run_agent
from loader.answer.prompt import prepare_question
from loader.answer.result import Answer
from loader.answer.single import answer_question
from loader.db import queries
from loader.db.session import connection
from loader.filters import SearchFilters
from loader.providers.chat import ChatClient
from loader.providers.query_embedding import PrefetchedQuery, query_embedder
from loader.settings import Settings, load_settings


@contextmanager
def reader_connection(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """A connection that can only read: autocommit (no transaction stays open while the model
    thinks) and every transaction read-only, whatever a tool or a bug would send."""
    with connection(settings, read=True) as conn:
        conn.autocommit = True
        conn.execute(queries.SESSION_READ_ONLY)
        conn.read_only = True
        yield conn


def ask(
    question: str,
    settings: Settings,
    *,
    agent: bool = False,
    category: str | None = None,
    on_text: Callable[[str], None] | None = None,
    filters: SearchFilters | None = None,
) -> Answer:
    """Answer ``question`` with the configured models over a connection of its own, within
    ``filters`` (``pgkb ask --category/--source/--meta``; ``category`` is a shorthand). A single
    category also scopes everything else the answer reads (related documents, the agent's tools
    and graph).

    The reader agent's steps use ``agent_chat_model`` when it is set, else ``chat_model``."""
    filters = SearchFilters.of(category=category).merged(filters)
    if len(filters.category) == 1:
        category = filters.category[0]
    if agent and settings.agent_model != settings.chat_model:
        settings = settings.replace(chat_model=settings.agent_model)
    client = ChatClient.from_settings(settings)
    # the question's embedding (through serve_url when set) is computed while the connection
    # opens; the agent embeds its own queries later
    embedder = PrefetchedQuery(query_embedder(settings), prepare_question(question)[1])
    with reader_connection(settings) as conn:
        if agent:
            return run_agent(
                conn,
                settings,
                question,
                embedder=embedder,
                client=client,
                category=category,
                filters=filters,
            )
        return answer_question(
            conn,
            settings,
            question,
            embedder=embedder,
            client=client,
            category=category,
            on_text=on_text,
            filters=filters,
        )


def ask_agent(
    question: str,
    settings: Settings | None = None,
    *,
    category: str | None = None,
) -> dict[str, Any]:
    """The reader agent for other programs: returns the distilled answer as a JSON-ready dict.

    ``{"answer", "abstained", "citations": [...], "related_documents": [...], ...}``; opens its
    own connection with ``settings`` (default: pgkb's configuration).
    """
    return ask(question, settings or load_settings(), agent=True, category=category).to_json()
