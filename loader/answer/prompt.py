"""The prompt: the answer contract's system rules, the question as retrieval reads it, and the
chunks as the model sees them."""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loader.answer.passages import CHARS_PER_TOKEN, Passage, estimate_tokens
from loader.errors import PgkbError

IDK = "I don't know"

RULE_IDK = 'If the chunks do not contain the answer, answer exactly "I don\'t know".'
RULE_UNSUPPORTED = "An unsupported answer is a bug as severe as a crash."

SYSTEM_RULES = f"""You answer questions using only the source chunks given in the user's message.

Rules:
1. Use only what the chunks say. Do not add facts from your own knowledge.
2. Cite the sources you used by title: the title in square brackets, exactly as it is written
after "title:", right after the statement it supports, like this: [Title of the chunk]. Cite
only titles that appear in the chunks.
3. {RULE_IDK}
4. {RULE_UNSUPPORTED}
5. Be brief: answer the question, then stop."""
"""The system message of every answer request (the contract the tests assert)."""

CONFIGURE_HINT = (
    "no chat model is configured, so these are the passages that match best; for a written "
    "answer set PGKB_CHAT_MODEL (and PGKB_CHAT_BASE_URL for Ollama, vLLM or another "
    "OpenAI-compatible server, PGKB_CHAT_API_KEY for OpenAI): see the documentation, "
    '"Asking questions" (docs/guides/ask.md)'
)

MAX_QUERY_CHARS = 2000
"""Retrieval reads at most this much of a question (the embedding model reads far less)."""
ANSWER_RESERVE_TOKENS = 1024
"""Tokens of the context window kept free for the model's answer."""


def clean_question(question: str) -> str:
    """The question without NUL and other control characters (PostgreSQL text refuses NUL)."""
    cleaned = "".join(
        ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else " " for ch in question
    )
    return re.sub(r"[ \t]+", " ", cleaned).strip()


def format_passage(passage: Passage) -> str:
    """One chunk as the model sees it: tagged with its title and source_uri."""
    lines = [f"title: {passage.title}", f"source_uri: {passage.source_uri}"]
    if passage.heading_path:
        lines.append(f"section: {passage.heading_path}")
    span = (
        f"{passage.chunk_index}"
        if passage.chunk_end is None
        else f"{passage.chunk_index}-{passage.chunk_end}"
    )
    lines.append(f"chunks: {span}")
    lines.append("text:")
    lines.append(passage.content.strip())
    return "\n".join(lines)


def format_passages(passages: Sequence[Passage]) -> str:
    return "\n\n".join(f"--- chunk ---\n{format_passage(p)}" for p in passages)


def truncate_question(question: str, max_tokens: int) -> str:
    limit = max(200, int(max_tokens * CHARS_PER_TOKEN))
    if len(question) <= limit:
        return question
    return question[:limit] + " [question truncated]"


def build_messages(
    question: str, passages: Sequence[Passage], *, context_tokens: int = 8192
) -> list[dict[str, Any]]:
    """The chat messages: the system rules, then the chunks and the question."""
    question = truncate_question(question, context_tokens // 4)
    user = (
        f"Source chunks:\n\n{format_passages(passages)}\n\n--- end of chunks ---\n\n"
        f"Question: {question}"
    )
    return [{"role": "system", "content": SYSTEM_RULES}, {"role": "user", "content": user}]


def messages_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    return estimate_tokens(json.dumps(list(messages), ensure_ascii=False, default=str))


def prepare_question(question: str) -> tuple[str, str]:
    """The cleaned question and the text retrieval reads; an empty question is an error."""
    cleaned = clean_question(question)
    if not cleaned:
        raise PgkbError("the question is empty", hint='ask something: pgkb ask "How do I ...?"')
    return cleaned, cleaned[:MAX_QUERY_CHARS]


def fit_passages(passages: Sequence[Passage], budget: int) -> list[Passage]:
    """The passages that fit ``budget`` tokens (the best one always, cut to fit if needed)."""
    kept: list[Passage] = []
    used = 0
    for passage in passages:
        cost = estimate_tokens(format_passage(passage)) + 8
        if used + cost > budget:
            if not kept:
                chars = max(200, int((budget - 50) * CHARS_PER_TOKEN))
                kept.append(dataclasses.replace(passage, content=passage.content[:chars]))
            break
        kept.append(passage)
        used += cost
    return kept
