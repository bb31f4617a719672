"""The one OpenAI-compatible layer the embeddings and chat clients share.

:func:`make_client` builds the ``openai`` SDK client the same way for both (a placeholder key for
local servers, which ignore it); :func:`retryable` and :func:`retry_delay` are the retry policy
(429, 408 and 5xx, timeouts and lost connections; exponential backoff with jitter, a
``Retry-After`` header honoured); :func:`error_text` reads the message of an API error body.
The embeddings client retries itself with this policy (so it can log and count attempts); the
chat client passes ``max_retries`` to the SDK, whose policy retries the same statuses.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

PLACEHOLDER_KEY = "not-needed"
"""Local servers (Ollama, vLLM, llama.cpp) ignore the key; the SDK insists on one."""


def make_client(
    *, base_url: str | None, api_key: str | None, timeout: float, max_retries: int
) -> Any:
    """An ``openai.OpenAI`` client for an OpenAI-compatible endpoint."""
    import openai

    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or PLACEHOLDER_KEY,
        timeout=timeout,
        max_retries=max_retries,
    )


def retryable(status: int) -> bool:
    """Whether an HTTP status is worth retrying: 408, 429 and 5xx."""
    return status == 429 or status >= 500 or status == 408


def retry_delay(attempt: int, exc: Exception, *, base: float, cap: float) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): ``Retry-After`` (capped at ``4 *
    cap``) when the response carries one, else ``base * 2**attempt`` capped at ``cap``, jittered."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        raw = headers.get("retry-after-ms")
        if raw:
            try:
                return min(float(raw) / 1000, cap * 4)
            except ValueError:
                pass
        raw = headers.get("retry-after")
        if raw:
            try:
                return min(float(raw), cap * 4)
            except ValueError:
                from email.utils import parsedate_to_datetime

                try:
                    when = parsedate_to_datetime(raw).timestamp()
                    return min(max(0.0, when - time.time()), cap * 4)
                except (TypeError, ValueError):
                    pass
    delay = min(cap, base * 2.0**attempt)
    return float(delay * (0.5 + random.random() / 2))


def error_text(exc: Any) -> str:
    """The server's own error message of an API error, at most 300 characters."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]
