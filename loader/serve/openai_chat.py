"""OpenAI's chat-completions wire on ``pgkb serve``: any chat UI or OpenAI client can ask the
knowledge base (``POST /v1/chat/completions``, ``GET /v1/models``).

The models: ``pgkb`` answers from every collection the server serves and its role may read;
``pgkb/<collection>`` from that collection only. The knowledge base's embedding model is listed
too (for ``/v1/embeddings``); a chat request naming it is refused with a message naming
``pgkb``.

A request: the last ``user`` message is the question; the earlier turns are its context. With
a chat model configured and earlier turns, the model first rewrites the question to stand on
its own ("and how many weeks?" after a question about parental leave), then the usual answer
path runs on it: retrieval, the abstention gate, the model's answer with its citations
checked. Without a chat model the answer is extractive (the best passages, cited); a follow-up
that refers back ("and ...", "what about ...", "it", "that", "they", ...) or that retrieval
cannot answer alone is read together with the previous user question. The client's
own system messages are not given to the model: pgkb's answer rules stand.

The reply: ``choices[0].message.content`` is the cited answer (or "I don't know"), followed by
a ``Sources:`` list when the model wrote it; the citations also come as a structured field,
``citations`` (title, source_uri, document_id, chunk_index, score, content), with ``pgkb``
(abstained, mode, question, notes, related_documents). The content is Markdown in which nothing
loads or runs (:mod:`loader.answer.markdown`): titles and URIs in the ``Sources:`` list are
escaped, images and links that are not http(s) are made text. ``stream: true`` sends the same as
server-sent events in OpenAI's chunk format, the text as the model writes it (as far as the
citation check lets it through: :mod:`loader.answer.stream`), ``citations`` and ``pgkb`` on the
last chunk, then ``data: [DONE]``; ``stream_options.include_usage`` adds the usage chunk.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loader.answer import markdown
from loader.answer.passages import estimate_tokens
from loader.app import AskRequest, BadRequest
from loader.errors import PgkbError
from loader.providers.chat import ChatError
from loader.serve.service import KnowledgeService
from loader.serve.streaming import Emitter, EventStream, sse

log = logging.getLogger(__name__)

BASE_MODEL = "pgkb"
MAX_MESSAGES = 200
MAX_CONTEXT_CHARS = 6000
"""Earlier turns given to the rewriting step, newest first, up to this many characters."""

CONDENSE_RULES = (
    "You rewrite the user's last message in a conversation as one standalone question that can "
    "be understood without the conversation: resolve pronouns and references ('it', 'that "
    "policy', 'and for managers?') from the earlier turns. Do not answer it. Reply with the "
    "question only, in the user's language. If the last message already stands on its own, "
    "repeat it unchanged."
)


class ModelNotFound(PgkbError):
    """The request names a model this server does not offer (HTTP 404, ``model_not_found``)."""


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    model: str
    question: str
    earlier: list[tuple[str, str]]
    """Earlier turns, oldest first: (role, text), user and assistant only."""
    stream: bool
    include_usage: bool


def _text_of(content: Any, where: str) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                if not isinstance(part.get("text"), str):
                    raise BadRequest(f"{where}: a text part needs a string 'text'")
                texts.append(part["text"])
        return "\n".join(texts)
    raise BadRequest(f"{where}.content must be a string or a list of content parts")


def parse_request(body: dict[str, Any]) -> ChatRequest:
    """The request's model, question and earlier turns; :class:`BadRequest` naming what is
    wrong. Fields pgkb does not use (temperature, max_tokens, tools, ...) are ignored."""
    model = body.get("model", BASE_MODEL)
    if not isinstance(model, str) or not model.strip():
        raise BadRequest('model must be a string: "pgkb" or "pgkb/<collection>" (GET /v1/models)')
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(
            "messages must be a non-empty list of {role, content} objects",
            hint='e.g. {"model": "pgkb", "messages": [{"role": "user", "content": "..."}]}',
        )
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} messages per request, got {len(messages)}")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise BadRequest(f"n must be 1 (pgkb gives one answer), got {json.dumps(n)[:20]}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {json.dumps(stream)[:20]}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object")
    turns: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"{where} must be an object with a string role")
        role = message["role"]
        if role in ("user", "assistant"):
            turns.append((role, _text_of(message.get("content"), where).strip()))
        elif role not in ("system", "developer", "tool", "function"):
            raise BadRequest(
                f"{where}.role {role!r} is not a chat role",
                hint="use system, user or assistant",
            )
    last = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last is None:
        raise BadRequest("messages hold no user message: the last user message is the question")
    question = turns[last][1]
    if not question:
        raise BadRequest("the last user message (the question) has no text")
    return ChatRequest(
        model=model.strip(),
        question=question,
        earlier=[t for t in turns[:last] if t[1]],
        stream=stream,
        include_usage=bool(options.get("include_usage")),
    )


def model_list(service: KnowledgeService) -> list[dict[str, Any]]:
    """``pgkb``, one ``pgkb/<collection>`` per collection served and readable, and the
    embedding model, in OpenAI's model objects."""
    created = int(time.time())
    ids = [BASE_MODEL, *(f"{BASE_MODEL}/{name}" for name in service.collections())]
    models = [{"id": i, "object": "model", "created": created, "owned_by": "pgkb"} for i in ids]
    models.append(
        {"id": service.model_name, "object": "model", "created": created, "owned_by": "pgkb"}
    )
    return models


def collections_of(service: KnowledgeService, model: str) -> list[str] | None:
    """The collections a chat model name stands for (None: every one served), or
    :class:`ModelNotFound` / :class:`BadRequest` naming the models offered."""
    if model == BASE_MODEL:
        return None
    if model == service.model_name:
        raise BadRequest(
            f"{model!r} is the knowledge base's embedding model (for /v1/embeddings); "
            f'chat with "{BASE_MODEL}"'
        )
    prefix = BASE_MODEL + "/"
    readable = service.collections()
    if model.startswith(prefix) and model[len(prefix) :] in readable:
        return [model[len(prefix) :]]
    offered = ", ".join([BASE_MODEL, *(prefix + n for n in readable)])
    raise ModelNotFound(
        f"the model {model!r} does not exist on this server; it offers: {offered}",
        hint="GET /v1/models lists them",
    )


def condense(service: KnowledgeService, request: ChatRequest) -> str:
    """The question made standalone from the earlier turns by the chat model (the last message
    as it is when there are none, no model, or the model fails)."""
    if not request.earlier or service.chat is None:
        return request.question
    lines: list[str] = []
    used = 0
    for role, text in reversed(request.earlier):
        line = f"{role}: {text}"
        if used + len(line) > MAX_CONTEXT_CHARS:
            break
        lines.insert(0, line)
        used += len(line)
    prompt = (
        "Conversation so far:\n"
        + "\n".join(lines)
        + f"\n\nLast user message: {request.question}\n\nStandalone question:"
    )
    messages = [{"role": "system", "content": CONDENSE_RULES}, {"role": "user", "content": prompt}]
    try:
        reply = service.chat.complete(messages)
    except ChatError as exc:
        log.warning("the question was not rewritten with the conversation: %s", exc.message)
        return request.question
    text = " ".join((reply.content or "").split())
    if not text or len(text) > 4 * len(request.question) + 400:
        return request.question
    return text


_REFERS_BACK = re.compile(
    r"^\s*(?:and|also|but|so|what about|how about)\b|\b(?:it|its|that|this|these|those|they|"
    r"them|their|there|he|she|him|her|the same)\b",
    re.IGNORECASE,
)


def refers_back(question: str) -> bool:
    """Whether an (English) follow-up leans on the turn before it: it opens with "and", "what
    about", ... or names something by a pronoun ("it", "that", "they", ...)."""
    return bool(_REFERS_BACK.search(question))


def answer(
    service: KnowledgeService,
    request: ChatRequest,
    collections: list[str] | None,
    on_text: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``service.ask`` on the question made standalone. With a chat model, the model rewrites
    it (:func:`condense`); without one, a follow-up that refers back (:func:`refers_back`), or
    that abstains alone, is asked together with the previous user question."""
    previous = [text for role, text in request.earlier if role == "user"]

    def ask(question: str, stream: Callable[[str], None] | None = None) -> dict[str, Any]:
        asked = AskRequest.of(question, collections=collections)
        return service.ask(asked, on_checked_text=stream).to_json()

    if service.chat is not None or not previous:
        return ask(condense(service, request), on_text)
    joined = f"{previous[-1]}\n{request.question}"
    if refers_back(request.question):
        result = ask(joined)
    else:
        result = ask(request.question)
        if result["abstained"]:
            retry = ask(joined)
            result = result if retry["abstained"] else retry
    if on_text is not None:
        on_text(result["answer"])
    return result


def sources_footer(result: dict[str, Any]) -> str:
    """The cited sources under a model's answer (the extractive answer names them itself)."""
    if result["mode"] not in ("model", "agent") or not result["citations"]:
        return ""
    lines: list[str] = []
    seen: set[str] = set()
    for citation in result["citations"]:
        uri = citation["source_uri"]
        if uri in seen:
            continue
        seen.add(uri)
        title = markdown.escape(citation["title"])
        link = (
            f"[{title}]({markdown.link_target(uri)})"
            if uri.startswith(("http://", "https://"))
            else f"{title}: {markdown.escape(uri)}"
        )  # a title or a URI can carry Markdown: escaped, it is text
        lines.append(f"{len(lines) + 1}. {link}")
    return "\n\nSources:\n" + "\n".join(lines)


def extras(result: dict[str, Any]) -> dict[str, Any]:
    """The fields pgkb adds to OpenAI's reply: ``citations`` and ``pgkb``."""
    return {
        "citations": [
            {
                k: c.get(k)
                for k in (
                    "title",
                    "source_uri",
                    "document_id",
                    "chunk_index",
                    "chunk_end",
                    "score",
                    "content",
                )
                if k in c
            }
            for c in result["citations"]
        ],
        "pgkb": {
            "abstained": result["abstained"],
            "mode": result["mode"],
            "question": result["question"],
            "notes": result["notes"],
            "related_documents": result["related_documents"],
        },
    }


def usage(request: ChatRequest, content: str) -> dict[str, int]:
    prompt = estimate_tokens(request.question + "".join(t for _, t in request.earlier))
    completion = estimate_tokens(content)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


JsonBody = Callable[[Request], Awaitable[dict[str, Any]]]


def chat_completions(
    service: KnowledgeService,
    json_body: JsonBody,
    error_response: Callable[[PgkbError], Response],
) -> Callable[[Request], Any]:
    """The ``POST /v1/chat/completions`` endpoint over ``service`` (``json_body`` reads the
    request's JSON object; ``error_response`` is the server's error for a failure that comes
    before a stream started)."""

    async def endpoint(request: Request) -> Response:
        chat = parse_request(await json_body(request))
        collections = await anyio.to_thread.run_sync(lambda: collections_of(service, chat.model))
        ident = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if not chat.stream:
            result = await anyio.to_thread.run_sync(lambda: answer(service, chat, collections))
            request.state.pgkb_mode = result["mode"]
            content = markdown.neutralise(result["answer"]) + sources_footer(result)
            return JSONResponse(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": created,
                    "model": chat.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                            "logprobs": None,
                        }
                    ],
                    "usage": usage(chat, content),
                    **json.loads(json.dumps(extras(result), default=str)),
                }
            )

        base = {"id": ident, "object": "chat.completion.chunk", "created": created,
                "model": chat.model}  # fmt: skip
        sent: list[str] = []

        def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return sse({**base, "choices": [choice], **more})

        def work(emit: Emitter) -> dict[str, Any]:
            return answer(service, chat, collections, on_text=lambda piece: emit("text", piece))

        def render(kind: str, value: Any) -> list[bytes]:
            if kind == "text":
                out = [chunk({"role": "assistant", "content": ""})] if not sent else []
                text = markdown.neutralise(value)  # pieces end outside any link or tag
                sent.append(text)
                return [*out, chunk({"content": text})]
            if kind == "done":
                request.state.pgkb_mode = value["mode"]
                out = [chunk({"role": "assistant", "content": ""})] if not sent else []
                footer = sources_footer(value)
                if footer:
                    out.append(chunk({"content": footer}))
                added = json.loads(json.dumps(extras(value), default=str))
                out.append(chunk({}, "stop", **added))
                if chat.include_usage:
                    content = "".join(sent) + footer
                    out.append(sse({**base, "choices": [], "usage": usage(chat, content)}))
                return [*out, b"data: [DONE]\n\n"]
            if kind == "error":
                assert isinstance(value, PgkbError)
                message = value.message + (f" ({value.hint})" if value.hint else "")
                return [sse({"error": {"message": message, "type": "server_error"}}),
                        b"data: [DONE]\n\n"]  # fmt: skip
            return []

        return EventStream(work, render, error_response)

    return endpoint


def models_endpoint(service: KnowledgeService) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        data = await anyio.to_thread.run_sync(lambda: model_list(service))
        return JSONResponse({"object": "list", "data": data})

    return endpoint
