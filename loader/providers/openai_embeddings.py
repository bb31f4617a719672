"""Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure, Ollama, vLLM, LM Studio).

Requests are batched by count (at most 2,048 inputs) and by a token budget, retried with the
shared policy of :mod:`loader.providers.openai_compat` (exponential backoff on 429, 5xx, timeouts
and lost connections, ``Retry-After`` honoured), and every response is checked: one vector per
input, each of the configured dimension. Token counts are a conservative heuristic (one token per
3 UTF-8 bytes, which over-counts English for OpenAI's BPE tokenizers by about a quarter), since
the exact tokenizer of an arbitrary endpoint is unknown.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from loader.errors import ModelMismatchError, PgkbError
from loader.providers import openai_compat
from loader.safety import api_key_for

OPENAI_MAX_BATCH = 2048
"""The OpenAI embeddings API accepts at most this many inputs per request."""
OPENAI_MAX_BATCH_TOKENS = 300_000
"""OpenAI's limit on the total tokens of one embeddings request."""
OPENAI_MAX_INPUT_TOKENS = 8191
"""OpenAI's embedding models read at most this many tokens (``embedding_max_input_tokens``
when unset)."""


def heuristic_tokens(text: str) -> int:
    """A conservative token estimate for BPE tokenizers: one token per 3 UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8")) / 3)


@dataclasses.dataclass(frozen=True)
class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint, batched, retried and validated.

    Immutable: other settings make another instance (equal settings, an equal instance, which
    :func:`loader.providers.embeddings.get_embedder` caches)."""

    provider: ClassVar[str] = "openai"
    special_tokens: ClassVar[int] = 0

    name: str
    dims: int
    base_url: str | None = None
    api_key: str | None = dataclasses.field(default=None, repr=False)
    max_input_tokens: int = OPENAI_MAX_INPUT_TOKENS
    batch_size: int = OPENAI_MAX_BATCH
    """Inputs per request, at most :data:`OPENAI_MAX_BATCH` (a larger value is clamped)."""
    max_batch_tokens: int = OPENAI_MAX_BATCH_TOKENS
    timeout: float = 60.0
    max_retries: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    sleep: Callable[[float], None] = dataclasses.field(default=time.sleep, repr=False)
    query_prompt: str = ""
    """Put before every query (``embedding_query_prompt``)."""
    document_prompt: str = ""
    """Put before every passage (``embedding_document_prompt``)."""
    request_dimensions: bool = False
    """Send ``dims`` as the request's ``dimensions`` (``embedding_request_dimensions``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_size", max(1, min(self.batch_size, OPENAI_MAX_BATCH)))

    @functools.cached_property
    def client(self) -> Any:
        """The SDK client, made on first use (importing ``openai`` takes a moment)."""
        return openai_compat.make_client(
            base_url=self.base_url,
            # OPENAI_API_KEY goes to OpenAI's API only, never to another base_url; local
            # servers (Ollama, vLLM) ignore the key, the client insists on one
            api_key=api_key_for(self.base_url, self.api_key, os.environ),
            timeout=self.timeout,
        )

    @property
    def endpoint(self) -> openai_compat.Endpoint:
        return openai_compat.Endpoint(
            "the embeddings API",
            self.base_url,
            self.name,
            self.timeout,
            "PGKB_EMBEDDING",
            on_give_up="; nothing was written for the documents not yet stored",
        )

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
        inputs = [self.document_prompt + t for t in texts]
        vectors: list[list[float]] = []
        for group in self.batches(inputs):
            vectors.extend(self._request([inputs[i] for i in group]))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._request([self.query_prompt + text])[0]

    def _request(self, batch: list[str]) -> list[list[float]]:
        policy = openai_compat.RetryPolicy(
            self.max_retries, self.backoff_base, self.backoff_max, self.sleep
        )
        options: dict[str, Any] = {"dimensions": self.dims} if self.request_dimensions else {}
        response = openai_compat.call(
            lambda: self.client.embeddings.create(
                model=self.name, input=batch, encoding_format="float", **options
            ),
            self.endpoint,
            policy,
        )
        return self._validate(batch, response)

    def _validate(self, batch: list[str], response: Any) -> list[list[float]]:
        data = list(getattr(response, "data", None) or [])
        if len(data) != len(batch):
            raise PgkbError(
                f"{self.endpoint} returned {len(data)} vectors for {len(batch)} inputs",
                hint="the endpoint is not a conforming OpenAI-compatible embeddings API; "
                "nothing was written for this batch",
            )
        ordered: list[list[float] | None] = [None] * len(batch)
        for position, item in enumerate(data):
            index = getattr(item, "index", position)
            if not isinstance(index, int) or not 0 <= index < len(batch) or ordered[index]:
                raise PgkbError(f"{self.endpoint} returned an invalid index {index!r}")
            vector = list(item.embedding)
            if len(vector) != self.dims:
                raise ModelMismatchError(
                    f"{self.endpoint} returned {len(vector)}-dimensional "
                    f"vectors, but embedding_dims is {self.dims}",
                    hint=f"set PGKB_EMBEDDING_DIMS={len(vector)} if that is the model you "
                    "want (a new vector space), or fix PGKB_EMBEDDING_MODEL",
                )
            ordered[index] = [float(v) for v in vector]
        return [v for v in ordered if v is not None]
