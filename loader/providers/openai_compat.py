"""The one OpenAI-compatible layer the embeddings and chat clients share.

:func:`make_client` builds the ``openai`` SDK client the same way for both (a placeholder key for
local servers, which ignore it; the SDK's own retries off); :func:`call` sends one request under
the one retry policy (:class:`RetryPolicy`: 429, 408 and 5xx, timeouts and lost connections are
retried with exponential backoff and jitter, a ``Retry-After`` header honoured) and turns every
failure into a :class:`~loader.errors.PgkbError` (or the caller's subclass) that names the
endpoint (:class:`Endpoint`: what it is, its base URL and model) and what to do.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from loader.errors import PgkbError
from loader.safety import redact

log = logging.getLogger(__name__)

T = TypeVar("T")

PLACEHOLDER_KEY = "not-needed"
"""Local servers (Ollama, vLLM, llama.cpp) ignore the key; the SDK insists on one."""


def make_client(*, base_url: str | None, api_key: str | None, timeout: float) -> Any:
    """An ``openai.OpenAI`` client for an OpenAI-compatible endpoint, without the SDK's own
    retries (:func:`call` retries, with the policy every client shares)."""
    import openai

    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or PLACEHOLDER_KEY,
        timeout=timeout,
        max_retries=0,
    )


def retryable(status: int) -> bool:
    """Whether an HTTP status is worth retrying: 408, 429 and 5xx."""
    return status == 429 or status >= 500 or status == 408


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait: ``max_retries`` retries after the first attempt."""

    max_retries: int
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int, exc: Exception) -> float:
        """Seconds to wait before retry ``attempt`` (0-based): ``Retry-After`` (capped at
        ``4 * backoff_max``) when the response carries one, else ``backoff_base * 2**attempt``
        capped at ``backoff_max``, jittered."""
        return retry_delay(attempt, exc, base=self.backoff_base, cap=self.backoff_max)


def retry_delay(attempt: int, exc: Exception, *, base: float, cap: float) -> float:
    """See :meth:`RetryPolicy.delay`."""
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


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible endpoint as error messages name it."""

    kind: str
    """What it is, e.g. ``the chat model``, ``the embeddings API``."""
    base_url: str | None
    """None: OpenAI's own API."""
    model: str
    timeout: float
    env: str
    """The prefix of its settings, e.g. ``PGKB_CHAT``: hints name ``{env}_BASE_URL``, ..."""
    on_give_up: str = ""
    """Appended to the hint when the retries are used up (e.g. what was not written)."""

    def __str__(self) -> str:

        where = redact(self.base_url) if self.base_url else "https://api.openai.com/v1"
        return f"{self.kind} at {where} (model {self.model})"

    def status_hint(self, status: int) -> str:
        """What to do about an HTTP error that is not retried."""
        if status in (401, 403):
            return f"check {self.env}_API_KEY"
        return f"check {self.env}_MODEL and {self.env}_BASE_URL"


def call(
    request: Callable[[], T],
    endpoint: Endpoint,
    policy: RetryPolicy,
    *,
    error: type[PgkbError] = PgkbError,
) -> T:
    """``request()`` (one SDK call), retried under ``policy`` on 429, 408, 5xx, timeouts and
    lost connections; any other HTTP error at once, and the last failure once the retries are
    used up, raised as ``error`` naming ``endpoint`` and what to do. Other exceptions (a reply
    the SDK cannot parse, ...) pass through unchanged."""
    import openai

    attempt = 0
    while True:
        failure: Exception
        try:
            return request()
        except openai.APITimeoutError as exc:
            failure = exc
            detail = f"{endpoint} timed out: it did not answer within {endpoint.timeout:g} s"
            hint = f"raise {endpoint.env}_TIMEOUT or check the server's load"
        except openai.APIConnectionError as exc:
            failure = exc
            detail = f"cannot reach {endpoint}: the server is unreachable"
            hint = f"check {endpoint.env}_BASE_URL and that the server is up"
        except openai.APIStatusError as exc:
            status = exc.status_code
            failure = exc
            detail = f"{endpoint} answered HTTP {status}: {error_text(exc)}"
            hint = f"check {endpoint.env}_BASE_URL and that the server is up"
            if not retryable(status):
                raise error(detail, hint=endpoint.status_hint(status)) from None
        if attempt >= policy.max_retries:
            tries = "1 attempt" if attempt == 0 else f"{attempt + 1} attempts"
            given_up = error(f"{detail} (gave up after {tries})", hint=hint + endpoint.on_give_up)
            given_up.transient = True  # the server may answer later: a queued job is retried
            raise given_up from None
        delay = policy.delay(attempt, failure)
        log.warning("%s; retrying in %.1f s", detail, delay)
        policy.sleep(delay)
        attempt += 1
