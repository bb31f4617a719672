"""An OpenAI-compatible chat-completions client (OpenAI, Azure, Ollama, vLLM, llama.cpp, ...).

Built on the shared layer of :mod:`loader.providers.openai_compat` (client factory, retry policy,
error messages); every failure surfaces as :class:`ChatError` with a message naming the endpoint.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from loader.errors import ConfigError, PgkbError
from loader.providers import openai_compat
from loader.safety import call_with_timeout, redact
from loader.settings import Settings


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

    Retries (``chat_max_retries``, or ``max_retries`` when given) follow the shared policy of
    :func:`loader.providers.openai_compat.call`: 408, 429, 5xx, timeouts and lost connections,
    exponential backoff, ``Retry-After`` honoured; a streamed reply is retried only until its
    first byte. Every failure surfaces as :class:`ChatError` with a message naming the endpoint.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        max_retries: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not settings.chat_model:
            raise ConfigError("no chat model is configured", hint="set PGKB_CHAT_MODEL")
        api_key = settings.chat_api_key
        if not api_key and not settings.chat_base_url:
            raise ConfigError(
                f"chat_model is {settings.chat_model!r} with no chat_base_url, which means "
                "OpenAI's API, but no chat_api_key is set",
                hint="set PGKB_CHAT_API_KEY, or PGKB_CHAT_BASE_URL for a local server "
                "(Ollama: http://localhost:11434/v1)",
            )
        self.model = settings.chat_model
        self.base_url = redact(settings.chat_base_url or "https://api.openai.com/v1")  # shown
        self.timeout = settings.chat_timeout
        self.deadline = settings.chat_deadline
        self.endpoint = openai_compat.Endpoint(
            "the chat model", settings.chat_base_url, self.model, self.timeout, "PGKB_CHAT"
        )
        self.retry = openai_compat.RetryPolicy(
            settings.chat_max_retries if max_retries is None else max_retries, sleep=sleep
        )
        self._client = openai_compat.make_client(
            base_url=settings.chat_base_url, api_key=api_key, timeout=settings.chat_timeout
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
        options: Mapping[str, Any] | None = None,
    ) -> ChatReply:
        """One chat completion; with ``on_text``, streamed (each text piece passed to it).

        ``options``: more request fields (``temperature``, ``max_tokens``, ...)."""
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        kwargs.update(options or {})
        if tools:
            kwargs["tools"] = list(tools)
            if tool_choice:
                kwargs["tool_choice"] = tool_choice
        try:
            if on_text is not None:
                return self._stream(kwargs, on_text, time.monotonic() + self.deadline)
            try:  # the whole request, retries included, within chat_deadline
                response = call_with_timeout(
                    lambda: self._call(lambda: self._client.chat.completions.create(**kwargs)),
                    self.deadline,
                )
            except TimeoutError:
                raise self._past_deadline() from None
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
        except (openai.OpenAIError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ChatError(
                f"the chat model at {self.base_url} sent a reply pgkb cannot read: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def _call(self, request: Callable[[], Any]) -> Any:
        """``request()`` under the shared retry policy, failures as :class:`ChatError`."""
        return openai_compat.call(request, self.endpoint, self.retry, error=ChatError)

    def _past_deadline(self) -> ChatError:
        return ChatError(
            f"the chat model at {self.base_url} did not finish its reply within "
            f"{self.deadline:g} s (chat_deadline)",
            hint="raise PGKB_CHAT_DEADLINE or check the server's load",
        )

    def _stream(
        self, kwargs: dict[str, Any], on_text: Callable[[str], None], deadline: float
    ) -> ChatReply:
        stream = self._call(lambda: self._client.chat.completions.create(**kwargs, stream=True))
        text: list[str] = []
        try:
            return self._read_stream(stream, on_text, deadline, text)
        except ChatError:
            raise
        except Exception as exc:
            if not _lost_connection(exc):
                raise
            # httpx's RemoteProtocolError, ReadError, ReadTimeout, or the SDK's wrapper of one
            where = f"after {len(''.join(text))} characters" if text else "before any text"
            raise ChatError(
                f"the connection to the chat model at {self.base_url} was lost mid-reply "
                f"({where}): {type(exc).__name__}",
                hint="check the server; pgkb ask retries nothing once a reply has started",
            ) from None
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _read_stream(
        self, stream: Any, on_text: Callable[[str], None], deadline: float, text: list[str]
    ) -> ChatReply:
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        for chunk in stream:
            if time.monotonic() > deadline:
                raise self._past_deadline()
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


def _lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is a transport failure of a started stream: the SDK's connection and
    timeout errors, or the HTTP library's own (httpx/httpcore), which the SDK does not always
    wrap while a stream is read."""
    import openai

    if isinstance(exc, openai.APIConnectionError | ConnectionError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "h11")
