"""Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure, Ollama, vLLM, LM Studio).

Requests are batched by count (at most 2,048 inputs) and by a token budget, retried with the
shared policy of :mod:`loader.providers.openai_compat` (exponential backoff on 429, 5xx, timeouts
and lost connections, ``Retry-After`` honoured), and every response is checked: one vector per
input, each of the configured dimension. Token counts are a conservative heuristic (one token per
3 UTF-8 bytes, which over-counts English for OpenAI's BPE tokenizers by about a quarter), since
the exact tokenizer of an arbitrary endpoint is unknown.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from loader.errors import ModelMismatchError, PgkbError
from loader.providers import openai_compat
from loader.settings import Settings

log = logging.getLogger(__name__)

OPENAI_MAX_BATCH = 2048
"""The OpenAI embeddings API accepts at most this many inputs per request."""
OPENAI_MAX_BATCH_TOKENS = 300_000
"""OpenAI's limit on the total tokens of one embeddings request."""


def heuristic_tokens(text: str) -> int:
    """A conservative token estimate for BPE tokenizers: one token per 3 UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8")) / 3)


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint, batched, retried and validated."""

    provider = "openai"
    special_tokens = 0

    def __init__(
        self,
        name: str,
        dims: int,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_input_tokens: int = 8191,
        batch_size: int = 2048,
        max_batch_tokens: int = OPENAI_MAX_BATCH_TOKENS,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self.dims = dims
        self.base_url = base_url
        self.max_input_tokens = max_input_tokens
        self.batch_size = max(1, min(batch_size, OPENAI_MAX_BATCH))
        self.max_batch_tokens = max_batch_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._api_key = api_key
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from loader.safety import api_key_for

            self._client = openai_compat.make_client(
                base_url=self.base_url,
                # OPENAI_API_KEY goes to OpenAI's API only, never to another base_url; local
                # servers (Ollama, vLLM) ignore the key, the client insists on one
                api_key=api_key_for(self.base_url, self._api_key, os.environ),
                timeout=self.timeout,
                max_retries=0,  # retried here, with the shared policy
            )
        return self._client

    def configure(self, settings: Settings) -> None:
        """Apply the per-run knobs of ``settings`` that do not change the vector space."""
        self.batch_size = max(1, min(settings.embedding_batch_size, OPENAI_MAX_BATCH))
        self.max_input_tokens = settings.embedding_max_input_tokens
        self.timeout = settings.embedding_timeout
        self.max_retries = settings.embedding_max_retries
        if settings.embedding_api_key and settings.embedding_api_key != self._api_key:
            self._api_key = settings.embedding_api_key
            self._client = None

    def count_tokens(self, text: str) -> int:
        return heuristic_tokens(text)

    def batches(self, texts: Sequence[str]) -> list[list[int]]:
        """Indexes of ``texts`` grouped by count (``batch_size``) and token budget."""
        groups: list[list[int]] = []
        current: list[int] = []
        tokens = 0
        for i, text in enumerate(texts):
            n = self.count_tokens(text)
            if current and (len(current) >= self.batch_size or tokens + n > self.max_batch_tokens):
                groups.append(current)
                current, tokens = [], 0
            current.append(i)
            tokens += n
        if current:
            groups.append(current)
        return groups

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for group in self.batches(texts):
            vectors.extend(self._request([texts[i] for i in group]))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._request([text])[0]

    def _where(self) -> str:
        from loader.safety import redact

        return f"{self.name} at {redact(self.base_url or 'the OpenAI API')}"

    def _retry_delay(self, attempt: int, exc: Exception) -> float:
        return openai_compat.retry_delay(attempt, exc, base=self.backoff_base, cap=self.backoff_max)

    def _request(self, batch: list[str]) -> list[list[float]]:
        import openai

        attempt = 0
        while True:
            failure: Exception
            try:
                response = self.client.embeddings.create(
                    model=self.name, input=batch, encoding_format="float"
                )
                break
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                reason = "timed out" if isinstance(exc, openai.APITimeoutError) else "unreachable"
                failure, detail = exc, f"the embeddings API {self._where()} is {reason}"
            except openai.APIStatusError as exc:
                status = exc.status_code
                retryable = openai_compat.retryable(status)
                failure = exc
                detail = f"the embeddings API {self._where()} answered HTTP {status}: {exc.message}"
                if not retryable:
                    hint = (
                        "check PGKB_EMBEDDING_API_KEY"
                        if status in (401, 403)
                        else "check PGKB_EMBEDDING_MODEL and PGKB_EMBEDDING_BASE_URL"
                    )
                    raise PgkbError(detail, hint=hint) from None
            if attempt >= self.max_retries:
                raise PgkbError(
                    f"{detail} (gave up after {attempt + 1} attempts)",
                    hint="check PGKB_EMBEDDING_BASE_URL and that the server is up; "
                    "nothing was written for the documents not yet stored",
                )
            delay = self._retry_delay(attempt, failure)
            log.warning("%s; retrying in %.1f s", detail, delay)
            self._sleep(delay)
            attempt += 1
        return self._validate(batch, response)

    def _validate(self, batch: list[str], response: Any) -> list[list[float]]:
        data = list(getattr(response, "data", None) or [])
        if len(data) != len(batch):
            raise PgkbError(
                f"the embeddings API {self._where()} returned {len(data)} vectors "
                f"for {len(batch)} inputs",
                hint="the endpoint is not a conforming OpenAI-compatible embeddings API; "
                "nothing was written for this batch",
            )
        ordered: list[list[float] | None] = [None] * len(batch)
        for position, item in enumerate(data):
            index = getattr(item, "index", position)
            if not isinstance(index, int) or not 0 <= index < len(batch) or ordered[index]:
                raise PgkbError(
                    f"the embeddings API {self._where()} returned an invalid index {index!r}"
                )
            vector = list(item.embedding)
            if len(vector) != self.dims:
                raise ModelMismatchError(
                    f"the embeddings API {self._where()} returned {len(vector)}-dimensional "
                    f"vectors, but embedding_dims is {self.dims}",
                    hint=f"set PGKB_EMBEDDING_DIMS={len(vector)} if that is the model you "
                    "want (a new vector space), or fix PGKB_EMBEDDING_MODEL",
                )
            ordered[index] = [float(v) for v in vector]
        return [v for v in ordered if v is not None]


# --- one instance per process -------------------------------------------------------------------
