"""Answers with citations, or an honest "I don't know".

The answer contract (SPEC point 6), in the order :func:`answer_question` applies it:

1. **Retrieve**: hybrid search, top ``match_count`` (5), optionally within a category.
2. **Abstain before any model call** when the abstention gate (:mod:`loader.abstention`,
   thresholds calibrated by the eval) says retrieval found nothing that answers: the answer is
   "I don't know" with the closest sources found.
3. **Prompt** = :data:`SYSTEM_RULES` + the retrieved chunks, each tagged with its title and
   ``source_uri`` (neighbouring chunks merged in while the context budget allows) + the question.
4. **Call the chat model** (any OpenAI-compatible endpoint, :class:`ChatClient`): timeouts,
   retries with backoff, streaming to the terminal when interactive.
5. **Check the reply** (:func:`check_citations`): a citation is a retrieved title in square
   brackets; a bracket naming anything else is removed from the answer and reported; a reply
   that cites no retrieved title is treated as "I don't know".

With no chat model configured, or when the model or the network fails, the answer is
extractive: the best passages themselves, each with its title and source.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import psycopg

from loader.errors import ConfigError, PgkbError
from loader.safety import redact
from loader.settings import Settings

log = logging.getLogger(__name__)

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
    "OpenAI-compatible server, PGKB_CHAT_API_KEY for OpenAI): see the README, "
    '"Asking questions"'
)

MAX_QUERY_CHARS = 2000
"""Retrieval reads at most this much of a question (the embedding model reads far less)."""
ANSWER_RESERVE_TOKENS = 1024
"""Tokens of the context window kept free for the model's answer."""
CHARS_PER_TOKEN = 3.0
"""Conservative estimate for chat-model tokens (English is about 4 characters per token)."""


def estimate_tokens(text: str) -> int:
    """A conservative estimate of ``text``'s length in a chat model's tokens."""
    return int(len(text) / CHARS_PER_TOKEN) + 1


def clean_question(question: str) -> str:
    """The question without NUL and other control characters (PostgreSQL text refuses NUL)."""
    cleaned = "".join(
        ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else " " for ch in question
    )
    return re.sub(r"[ \t]+", " ", cleaned).strip()


# --- passages -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Passage:
    """A retrieved chunk (or a run of neighbouring chunks of one document) with its source."""

    document_id: str
    title: str
    source_uri: str
    chunk_index: int
    content: str
    score: float | None = None
    chunk_id: int | None = None
    heading_path: str = ""
    chunk_end: int | None = None
    """Last chunk index when neighbours were merged in (None: this chunk alone)."""

    @property
    def last_index(self) -> int:
        return self.chunk_index if self.chunk_end is None else self.chunk_end

    @classmethod
    def from_hit(cls, hit: Any) -> Passage:
        """A passage from a search hit (``loader.search.SearchHit`` or a mapping)."""

        def get(name: str, default: Any = None) -> Any:
            if isinstance(hit, Mapping):
                return hit.get(name, default)
            return getattr(hit, name, default)

        score = get("score")
        chunk_id = get("chunk_id")
        return cls(
            document_id=str(get("document_id")),
            title=str(get("title") or ""),
            source_uri=str(get("source_uri") or ""),
            chunk_index=int(get("chunk_index") or 0),
            content=str(get("content") or ""),
            score=None if score is None else float(score),
            chunk_id=None if chunk_id is None else int(chunk_id),
            heading_path=str(get("heading_path") or ""),
        )

    def citation_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "title": self.title,
            "source_uri": self.source_uri,
            "document_id": self.document_id,
            "chunk_index": self.chunk_index,
            "content": self.content,
            "score": self.score,
        }
        if self.chunk_end is not None:
            data["chunk_end"] = self.chunk_end
        return data


@dataclasses.dataclass(frozen=True)
class RelatedDocument:
    document_id: str
    title: str
    source_uri: str
    relation: str
    """Why it is related: ``retrieved`` (found, not cited) or a graph relation type."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- the prompt ---------------------------------------------------------------------------


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


# --- citations ----------------------------------------------------------------------------

_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.DOTALL)
_BRACKET = re.compile(r"(?<![\w\]\[])\[([^\[\]\n]{1,400})\](?!\()")
_PREFIX = re.compile(r"^(?:sources?|titles?|see|cf\.?|citation)\s*[:\-]?\s*", re.IGNORECASE)


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    text = text.strip().strip("\"'\u201c\u201d*_ ").strip()
    text = _PREFIX.sub("", text)
    return re.sub(r"\s+", " ", text).casefold().rstrip(".")


_SECTION_NUMBER = re.compile(r"^(?:\d+|[a-z])(?:\.\d+)*\.\s+")
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)


def _title_keys(title: str) -> list[str]:
    """Ways a reply may write ``title``: as is, and without a leading section number."""
    key = _norm(title)
    short = _SECTION_NUMBER.sub("", key)
    return [key, short] if short and short != key else [key]


def is_idk(text: str | None) -> bool:
    """Is ``text`` the answer "I don't know" (apostrophes, case, trailing punctuation aside)?"""
    if text is None:
        return True
    norm = _norm(text).rstrip(".!").strip()
    return norm in ("i don't know", "i do not know", "")


@dataclasses.dataclass
class CheckedReply:
    answer: str
    abstained: bool
    cited_titles: list[str]
    """Retrieved titles the reply cites, in order of first citation."""
    removed_citations: list[str]
    """Bracketed names in the reply that are not retrieved titles (removed from the answer)."""
    note: str | None = None


def check_citations(reply: str | None, passages: Sequence[Passage]) -> CheckedReply:
    """Keep citations of retrieved titles, remove the rest, and treat uncited replies as IDK.

    A citation is ``[Title]`` (several may share one bracket, separated by ``;``); it may also
    name a passage's ``source_uri``. Brackets inside code (backticks) are left alone.
    """
    if reply is not None:
        reply = _THINK.sub("", reply).strip()  # reasoning models' scratchpad is no answer
    if reply is None or is_idk(reply):
        return CheckedReply(IDK, True, [], [])
    by_key: dict[str, str] = {}
    for p in passages:
        by_key.setdefault(_norm(p.title), p.title)
        by_key.setdefault(_norm(p.source_uri), p.title)
    for p in passages:  # "[Index Types]" for "11.2. Index Types" (first title wins a tie)
        for key in _title_keys(p.title)[1:]:
            by_key.setdefault(key, p.title)
    by_key.pop("", None)

    cited: list[str] = []
    removed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        inner = match.group(1)
        parts = [s for s in re.split(r"\s*;\s*", inner) if s.strip()]
        if len(parts) > 1 and not all(_norm(s) in by_key for s in parts):
            parts = [inner]  # a title that itself contains ';'
        kept = []
        for part in parts:
            title = by_key.get(_norm(part))
            if title is None:
                removed.append(part.strip())
                continue
            kept.append(f"[{title}]")
            if title not in cited:
                cited.append(title)
        return " ".join(kept)

    pieces: list[str] = []
    position = 0
    for code in _CODE.finditer(reply):
        pieces.append(_BRACKET.sub(replace, reply[position : code.start()]))
        pieces.append(code.group(0))
        position = code.end()
    pieces.append(_BRACKET.sub(replace, reply[position:]))
    answer = "".join(pieces)
    answer = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", answer)).strip()

    if not cited:
        note = 'the reply cites no retrieved source, so it is treated as "I don\'t know"'
        return CheckedReply(IDK, True, [], removed, note)
    if is_idk(_BRACKET.sub("", answer)):  # "I don't know [Title]" is still "I don't know"
        return CheckedReply(IDK, True, [], removed)
    return CheckedReply(answer, False, cited, removed)


# --- extractive answers -------------------------------------------------------------------

_STOP_WORDS = (
    "a an and are as at be by can do does for from how "
    "i if in into is it its my of on or our should so "
    "than that the their them then there these they this to was we what "
    "when where which who why will with without would you your about after before "
    "between more most other some such use used using want need does did has "
    "have"
)
_STOP = frozenset(_STOP_WORDS.split())


def _terms(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9_]+", text.casefold())
    return {w[:6] for w in words if len(w) > 2 and w not in _STOP}


def best_excerpt(question: str, content: str, max_chars: int = 600) -> str:
    """The run of up to three sentences of ``content`` that shares most terms with the question."""
    text = re.sub(r"\s+", " ", content).strip()
    if len(text) <= max_chars:
        return text
    sentences = [s for s in re.split(r"(?<=[.!?:])\s+", text) if s]
    wanted = _terms(question)
    best: tuple[int, int] = (-1, 0)
    for start in range(len(sentences)):
        window = " ".join(sentences[start : start + 3])
        score = len(wanted & _terms(window))
        if score > best[0]:
            best = (score, start)
    window = " ".join(sentences[best[1] : best[1] + 3])
    if len(window) > max_chars:
        window = window[:max_chars].rsplit(" ", 1)[0] + " ..."
    prefix = "... " if best[1] > 0 else ""
    return prefix + window


def extractive_answer(question: str, passages: Sequence[Passage], max_passages: int = 3) -> str:
    """The best passages themselves, each with its title and source, as the answer text."""
    blocks = []
    for passage in passages[:max_passages]:
        blocks.append(
            f"[{passage.title}] ({passage.source_uri})\n  {best_excerpt(question, passage.content)}"
        )
    return "\n\n".join(blocks)


# --- the chat client ----------------------------------------------------------------------


class ChatError(PgkbError):
    """The chat model could not be reached or gave an unusable reply."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The raw JSON text the model sent (it may be malformed)."""


@dataclasses.dataclass
class ChatReply:
    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None = None

    def assistant_message(self) -> dict[str, Any]:
        """The reply as a message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


class ChatModel(Protocol):
    """What the answer path and the agent need from a chat model."""

    model: str

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ChatReply: ...


class ChatClient:
    """An OpenAI-compatible chat-completions client (OpenAI, Azure, Ollama, vLLM, llama.cpp, ...).

    Retries (``chat_max_retries``, exponential backoff, ``Retry-After`` honoured) are the
    ``openai`` package's own: on 408, 409, 429, 5xx, timeouts and lost connections. Every
    failure surfaces as :class:`ChatError` with a message naming the endpoint.
    """

    def __init__(self, settings: Settings) -> None:
        import openai

        if not settings.chat_model:
            raise ConfigError("no chat model is configured", hint="set PGKB_CHAT_MODEL")
        api_key = settings.chat_api_key
        if not api_key:
            if not settings.chat_base_url:
                raise ConfigError(
                    f"chat_model is {settings.chat_model!r} with no chat_base_url, which means "
                    "OpenAI's API, but no chat_api_key is set",
                    hint="set PGKB_CHAT_API_KEY, or PGKB_CHAT_BASE_URL for a local server "
                    "(Ollama: http://localhost:11434/v1)",
                )
            api_key = "not-needed"  # local servers ignore it; the client requires one
        self.model = settings.chat_model
        self.base_url = redact(settings.chat_base_url or "https://api.openai.com/v1")  # shown
        self.timeout = settings.chat_timeout
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=settings.chat_base_url or None,
            timeout=settings.chat_timeout,
            max_retries=settings.chat_max_retries,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatClient | None:
        """The configured client, or None when no chat model is configured."""
        return cls(settings) if settings.chat_model else None

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ChatReply:
        """One chat completion; with ``on_text``, streamed (each text piece passed to it)."""
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            kwargs["tools"] = list(tools)
            if tool_choice:
                kwargs["tool_choice"] = tool_choice
        try:
            if on_text is not None:
                return self._stream(kwargs, on_text)
            response = self._client.chat.completions.create(**kwargs)
            if not response.choices:
                raise ChatError(f"the chat model at {self.base_url} returned no choices")
            choice = response.choices[0]
            calls = [
                ToolCall(c.id, c.function.name, c.function.arguments or "")
                for c in (choice.message.tool_calls or [])
                if getattr(c, "function", None) is not None
            ]
            return ChatReply(choice.message.content, calls, choice.finish_reason)
        except ChatError:
            raise
        except openai.APITimeoutError:
            raise ChatError(
                f"the chat model at {self.base_url} did not answer within {self.timeout:g} s",
                hint="raise PGKB_CHAT_TIMEOUT or check the server's load",
            ) from None
        except openai.APIConnectionError as exc:
            raise ChatError(
                f"cannot reach the chat model at {self.base_url}: {exc}",
                hint="check PGKB_CHAT_BASE_URL and that the server is running",
            ) from None
        except openai.APIStatusError as exc:
            raise ChatError(
                f"the chat model at {self.base_url} answered HTTP {exc.status_code}: "
                f"{_error_text(exc)}",
                hint="check PGKB_CHAT_MODEL and PGKB_CHAT_API_KEY"
                if exc.status_code in (401, 403, 404)
                else None,
            ) from None
        except (openai.OpenAIError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ChatError(
                f"the chat model at {self.base_url} sent a reply pgkb cannot read: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def _stream(self, kwargs: dict[str, Any], on_text: Callable[[str], None]) -> ChatReply:
        stream = self._client.chat.completions.create(**kwargs, stream=True)
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                text.append(delta.content)
                on_text(delta.content)
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                if call.id:
                    slot["id"] = call.id
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
        tool_calls = [
            ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"])
            for i, c in sorted(calls.items())
        ]
        return ChatReply("".join(text) if text else None, tool_calls, finish)


def _error_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


# --- retrieval ----------------------------------------------------------------------------


class QueryEmbedder(Protocol):
    def embed_query(self, text: str) -> Sequence[float]: ...


def search_passages(
    conn: psycopg.Connection[Any],
    settings: Settings,
    query_text: str,
    query_embedding: Sequence[float] | None,
    *,
    limit: int | None = None,
    category: str | None = None,
    document_ids: Sequence[str] | None = None,
) -> tuple[list[Any], list[Passage]]:
    """Hybrid search; returns the raw hits (for the abstention gate) and their passages."""
    from loader.search import search

    hits = search(
        conn,
        query_text,
        query_embedding,
        settings=settings,
        mode="hybrid",
        limit=limit,
        category=category,
        document_ids=list(document_ids) if document_ids else None,
    )
    return list(hits), [Passage.from_hit(h) for h in hits]


_NEIGHBOURS_SQL = """
SELECT m.chunk_start, m.chunk_end, m.content
  FROM kb.merge_neighbors(%(chunk_id)s, %(before)s, %(after)s) AS m
"""


def _join_overlapping(left: str, right: str) -> str:
    """``left + right`` without the text they share (chunks overlap by a few tokens)."""
    left, right = left.rstrip(), right.lstrip()
    longest = min(len(left), len(right), 2000)
    for size in range(longest, 19, -1):
        if left.endswith(right[:size]):
            return left + right[size:]
    return left + "\n" + right


def expand_with_neighbours(
    conn: psycopg.Connection[Any],
    passages: Sequence[Passage],
    budget_tokens: int,
    *,
    expand_top: int = 3,
) -> list[Passage]:
    """The passages in rank order, with neighbouring chunks merged in while the budget allows.

    A hit's previous and next chunk are merged into it (the answer often runs across a chunk
    boundary) for the ``expand_top`` best hits, as long as the whole context stays within
    ``budget_tokens``. Passages of one document whose chunk ranges touch or overlap become one
    passage over the union of their ranges, joined by ``kb.merge_neighbors`` (which drops the
    chunker's overlap), so no text is sent twice.
    """
    used = sum(estimate_tokens(p.content) for p in passages)
    items: list[tuple[Passage, int]] = []  # (passage, chunk_index of its hit)
    for rank, passage in enumerate(passages):
        hit_index = passage.chunk_index
        if rank < expand_top and passage.chunk_id is not None and used < budget_tokens:
            row = conn.execute(
                _NEIGHBOURS_SQL, {"chunk_id": passage.chunk_id, "before": 1, "after": 1}
            ).fetchone()
            if row is not None and row[0] != row[1]:
                first, last, text = int(row[0]), int(row[1]), str(row[2])
                extra = estimate_tokens(text) - estimate_tokens(passage.content)
                if used + extra <= budget_tokens:
                    used += extra
                    passage = dataclasses.replace(
                        passage, content=text, chunk_index=first, chunk_end=last
                    )
        items.append((passage, hit_index))

    merged: list[tuple[Passage, int]] = []
    for passage, hit_index in items:
        for i, (earlier, earlier_hit) in enumerate(merged):
            if earlier.document_id != passage.document_id or not (
                passage.chunk_index <= earlier.last_index + 1
                and earlier.chunk_index <= passage.last_index + 1
            ):
                continue
            merged[i] = (_union(conn, earlier, earlier_hit, passage), earlier_hit)
            break
        else:
            merged.append((passage, hit_index))
    return [p for p, _ in merged]


def _union(conn: psycopg.Connection[Any], kept: Passage, hit_index: int, other: Passage) -> Passage:
    """``kept`` (the better ranked) widened to cover ``other``'s chunks too."""
    start = min(kept.chunk_index, other.chunk_index)
    end = max(kept.last_index, other.last_index)
    if (start, end) == (kept.chunk_index, kept.last_index):
        return kept
    row = None
    if kept.chunk_id is not None:
        row = conn.execute(
            _NEIGHBOURS_SQL,
            {"chunk_id": kept.chunk_id, "before": hit_index - start, "after": end - hit_index},
        ).fetchone()
    if row is not None:
        start, end, content = int(row[0]), int(row[1]), str(row[2])
    else:  # no chunk id to anchor on: join the texts
        first, second = (kept, other) if kept.chunk_index <= other.chunk_index else (other, kept)
        content = _join_overlapping(first.content, second.content)
    return dataclasses.replace(
        kept, content=content, chunk_index=start, chunk_end=end if end != start else None
    )


_RELATIONS_SQL = """
SELECT d.id::text, d.title, d.source_uri, r.relation_type
  FROM kb.document_relations r
  JOIN kb.documents d
    ON d.id = CASE WHEN r.source_id = ANY(%(ids)s::uuid[]) THEN r.target_id ELSE r.source_id END
 WHERE (r.source_id = ANY(%(ids)s::uuid[]) OR r.target_id = ANY(%(ids)s::uuid[]))
   AND NOT d.id = ANY(%(ids)s::uuid[])
 ORDER BY r.confidence DESC NULLS LAST, d.title
 LIMIT 10
"""


def related_documents(
    conn: psycopg.Connection[Any],
    cited: Sequence[Passage],
    retrieved: Sequence[Passage],
) -> list[RelatedDocument]:
    """Documents retrieved but not cited, then graph neighbours of the cited ones."""
    cited_ids = list(dict.fromkeys(p.document_id for p in cited))
    seen = set(cited_ids)
    related: list[RelatedDocument] = []
    for passage in retrieved:
        if passage.document_id not in seen:
            seen.add(passage.document_id)
            related.append(
                RelatedDocument(passage.document_id, passage.title, passage.source_uri, "retrieved")
            )
    anchor = cited_ids or [p.document_id for p in retrieved]
    if anchor:
        for doc_id, title, uri, relation in conn.execute(
            _RELATIONS_SQL, {"ids": anchor}
        ).fetchall():
            if doc_id not in seen:
                seen.add(doc_id)
                related.append(RelatedDocument(doc_id, title, uri, relation))
    return related


# --- the answer ---------------------------------------------------------------------------


@dataclasses.dataclass
class Answer:
    """What ``pgkb ask`` returns: the answer, whether it abstained, and its evidence."""

    question: str
    answer: str
    abstained: bool
    mode: str
    """``model`` (chat model, checked), ``extractive`` (no model configured), ``fallback``
    (the model failed: the hits are the answer), ``abstained`` (gate, before any model call),
    ``agent`` (the reader agent)."""
    citations: list[Passage]
    related_documents: list[RelatedDocument]
    context: list[Passage] = dataclasses.field(default_factory=list)
    """The passages the model was (or would have been) given."""
    removed_citations: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    abstention: dict[str, Any] | None = None
    model_reply: str | None = None
    """The model's reply before checking, when checking changed it."""
    hint: str | None = None
    steps: int = 0
    """Model calls made (the agent's steps; 1 for a plain answer, 0 when none was made)."""

    def to_json(self, *, show_context: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "question": self.question,
            "answer": self.answer,
            "abstained": self.abstained,
            "mode": self.mode,
            "citations": [p.citation_json() for p in self.citations],
            "related_documents": [d.to_json() for d in self.related_documents],
            "removed_citations": self.removed_citations,
            "notes": self.notes,
            "steps": self.steps,
        }
        if self.abstention is not None:
            data["abstention"] = self.abstention
        if self.model_reply is not None:
            data["model_reply"] = self.model_reply
        if self.hint:
            data["hint"] = self.hint
        if show_context:
            data["context"] = [p.citation_json() for p in self.context]
        return data


Gate = Callable[[psycopg.Connection[Any], Settings, str, Sequence[Any]], Any]


def default_gate(
    conn: psycopg.Connection[Any], settings: Settings, query_text: str, hits: Sequence[Any]
) -> Any:
    from loader.abstention import decide

    return decide(conn, settings, query_text, hits)


MAX_CITED_PASSAGES_PER_TITLE = 3


def cited_passages(passages: Sequence[Passage], titles: Sequence[str]) -> list[Passage]:
    """The passages of each cited title, in citation order: search hits by score, then chunks
    read in order, at most :data:`MAX_CITED_PASSAGES_PER_TITLE` per title (a citation points at
    evidence; it never carries a whole document)."""
    result: list[Passage] = []
    for title in titles:
        own = [p for p in passages if p.title == title]
        own.sort(key=lambda p: (p.score is None, -(p.score or 0.0)))
        result.extend(own[:MAX_CITED_PASSAGES_PER_TITLE])
    return result


def abstained_answer(
    conn: psycopg.Connection[Any],
    question: str,
    passages: Sequence[Passage],
    reason: str,
    signals: Mapping[str, Any] | None = None,
) -> Answer:
    """ "I don't know" with the closest sources found, and why."""
    return Answer(
        question=question,
        answer=IDK,
        abstained=True,
        mode="abstained",
        citations=[],
        related_documents=related_documents(conn, [], passages),
        context=list(passages),
        notes=[f"retrieval too weak to answer: {reason}"],
        abstention={"reason": reason, "signals": dict(signals or {})},
    )


def fallback_answer(
    conn: psycopg.Connection[Any],
    question: str,
    passages: Sequence[Passage],
    *,
    mode: str,
    notes: Sequence[str] = (),
    hint: str | None = None,
    steps: int = 0,
) -> Answer:
    """The extractive answer: the best passages, cited, instead of prose."""
    shown = list(passages[:3])
    return Answer(
        question=question,
        answer=extractive_answer(question, shown),
        abstained=False,
        mode=mode,
        citations=shown,
        related_documents=related_documents(conn, shown, passages),
        context=list(passages),
        notes=list(notes),
        hint=hint,
        steps=steps,
    )


def prepare_question(question: str) -> tuple[str, str]:
    """The cleaned question and the text retrieval reads; an empty question is an error."""
    cleaned = clean_question(question)
    if not cleaned:
        raise PgkbError("the question is empty", hint='ask something: pgkb ask "How do I ...?"')
    return cleaned, cleaned[:MAX_QUERY_CHARS]


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
) -> Answer:
    """Answer ``question`` from the knowledge base, with citations or "I don't know".

    ``client`` None means no chat model: the answer is extractive. ``on_text`` receives the
    model's reply as it streams (before it is checked). Model and network failures never
    raise: the answer falls back to the retrieved passages, with a note saying why.
    """
    question, query_text = prepare_question(question)
    notes: list[str] = []
    embedding = embed_query(embedder, query_text, notes)
    answer = _answer(
        conn, settings, question, query_text, embedding, client, category, on_text, gate
    )
    answer.notes[:0] = notes
    return answer


def embed_query(embedder: QueryEmbedder, text: str, notes: list[str]) -> Sequence[float] | None:
    """The query's embedding, or None (keyword-only search) when the embedding model fails."""
    try:
        return embedder.embed_query(text)
    except PgkbError as exc:
        log.warning("query embedding failed: %s", exc.message)
        notes.append(f"the embedding model failed ({exc.message}); searched by keywords only")
        return None


def _answer(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    query_text: str,
    embedding: Sequence[float] | None,
    client: ChatModel | None,
    category: str | None,
    on_text: Callable[[str], None] | None,
    gate: Gate | None,
) -> Answer:
    hits, passages = search_passages(
        conn, settings, query_text, embedding, limit=settings.match_count, category=category
    )
    decision = (gate or default_gate)(conn, settings, query_text, hits)
    if not hits or decision.abstain:
        reason = decision.reason if decision.abstain else "retrieval found nothing"
        return abstained_answer(conn, question, passages, reason, decision.signals)

    if client is None:
        return fallback_answer(
            conn, question, passages, mode="extractive", hint=CONFIGURE_HINT, notes=[]
        )

    budget = settings.chat_context_tokens - ANSWER_RESERVE_TOKENS - estimate_tokens(SYSTEM_RULES)
    budget -= estimate_tokens(truncate_question(question, settings.chat_context_tokens // 4))
    context = expand_with_neighbours(conn, passages, budget // 2)
    context = fit_passages(context, budget)

    messages = build_messages(question, context, context_tokens=settings.chat_context_tokens)
    try:
        reply = client.complete(messages, on_text=on_text)
    except ChatError as exc:
        log.warning("chat model failed: %s", exc.message)
        return fallback_answer(
            conn,
            question,
            passages,
            mode="fallback",
            notes=[f"{exc.message}; showing the retrieved passages instead"],
            steps=1,
        )
    checked = check_citations(reply.content, context)
    return checked_answer(conn, question, reply.content, checked, context, passages, steps=1)


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


def checked_answer(
    conn: psycopg.Connection[Any],
    question: str,
    raw: str | None,
    checked: CheckedReply,
    context: Sequence[Passage],
    retrieved: Sequence[Passage],
    *,
    steps: int,
    mode: str = "model",
    notes: Sequence[str] = (),
) -> Answer:
    all_notes = list(notes)
    if checked.removed_citations:
        all_notes.append(
            "removed citations of sources that were not retrieved: "
            + ", ".join(f"[{c}]" for c in checked.removed_citations)
        )
    if checked.note:
        all_notes.append(checked.note)
    cited = cited_passages(context, checked.cited_titles)
    return Answer(
        question=question,
        answer=checked.answer,
        abstained=checked.abstained,
        mode=mode,
        citations=cited,
        related_documents=related_documents(conn, cited, retrieved),
        context=list(context),
        removed_citations=checked.removed_citations,
        notes=all_notes,
        model_reply=raw if (raw or "").strip() != checked.answer else None,
        steps=steps,
    )
