"""The embedding interface and the embedder the settings describe.

Two implementations of :class:`Embedder`: :class:`~loader.providers.local.LocalEmbedder`
(all-MiniLM-L6-v2 on the CPU, offline, on ONNX Runtime) and
:class:`~loader.providers.openai_embeddings.OpenAIEmbedder` (any OpenAI-compatible
``/embeddings`` endpoint), both immutable. :func:`get_embedder` keeps one instance per
configuration in the process. The database's side (registering the model, refusing another) is
:func:`loader.providers.registry.ensure_model`: this module imports no database driver, so
``pgkb search`` can start embedding its query before it loads one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from loader.errors import ConfigError
from loader.providers.local import LocalEmbedder
from loader.providers.openai_embeddings import OPENAI_MAX_INPUT_TOKENS, OpenAIEmbedder
from loader.settings import DEFAULT_CHUNK_TOKENS, Settings


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one model (one vector space)."""

    @property
    def name(self) -> str: ...

    @property
    def dims(self) -> int: ...

    @property
    def provider(self) -> str: ...

    @property
    def max_input_tokens(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for passages (batched internally), in input order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The vector of one search query."""
        ...

    def count_tokens(self, text: str) -> int:
        """Length of ``text`` in the model's own tokens, without special tokens."""
        ...


def special_tokens(embedder: Embedder) -> int:
    """Tokens the model adds around every input (``[CLS]``/``[SEP]``: 2 for BERT models)."""
    return int(getattr(embedder, "special_tokens", 0))


def reserved_tokens(embedder: Embedder) -> int:
    """Tokens of every passage's input that are not the chunk: the special tokens and the
    document prompt."""
    prompt = getattr(embedder, "document_prompt", None) or ""
    return special_tokens(embedder) + (embedder.count_tokens(prompt) if prompt else 0)


def chunk_size(settings: Settings, embedder: Embedder) -> int:
    """The chunk size in ``embedder``'s tokens: ``chunk_tokens`` when set, else
    :data:`~loader.settings.DEFAULT_CHUNK_TOKENS` capped by what the model's input limit leaves
    (after its special tokens and document prompt).

    :class:`ConfigError` when a chunk plus those would not fit the model's input (a chunk
    longer than the model reads would be silently truncated by it: a configuration error,
    reported before any work starts), or when the overlap is not below the size.
    """
    extra = reserved_tokens(embedder)
    limit = embedder.max_input_tokens
    reads = getattr(embedder, "model_max_tokens", None)
    if reads is not None and limit > reads:
        raise ConfigError(
            f"embedding_max_input_tokens={limit} exceeds what {embedder.name} reads "
            f"({reads} tokens): longer inputs would be silently truncated",
            hint=f"set PGKB_EMBEDDING_MAX_INPUT_TOKENS to at most {reads}",
        )
    what = f"the {extra} special and prompt tokens" if extra else "its special tokens (none)"
    if settings.chunk_tokens is None:
        size = min(DEFAULT_CHUNK_TOKENS, limit - extra)
        if size < 16:
            raise ConfigError(
                f"{embedder.name} reads {limit} tokens; after {what} no chunk of at least 16 "
                "tokens fits",
                hint="use a model with a larger input, or a shorter PGKB_EMBEDDING_DOCUMENT_PROMPT",
            )
    else:
        size = settings.chunk_tokens
        if size + extra > limit:
            raise ConfigError(
                f"chunk_tokens={size} plus {what} of {embedder.name} exceeds its input limit "
                f"of {limit} tokens (the model would silently truncate every long chunk)",
                hint=f"set PGKB_CHUNK_TOKENS to at most {limit - extra}",
            )
    if settings.chunk_overlap >= size:
        raise ConfigError(
            f"chunk_overlap={settings.chunk_overlap} is not below the chunk size of {size} "
            f"tokens ({embedder.name} reads {limit})",
            hint=f"set PGKB_CHUNK_OVERLAP below {size}",
        )
    return size


def check_chunk_size(settings: Settings, embedder: Embedder) -> None:
    """Raise :class:`ConfigError` unless chunks fit the model's input (:func:`chunk_size`)."""
    chunk_size(settings, embedder)


# --- one instance per configuration ------------------------------------------------------------

_CACHE: dict[LocalEmbedder | OpenAIEmbedder, LocalEmbedder | OpenAIEmbedder] = {}
_CACHE_LOCK = threading.Lock()


def get_embedder(settings: Settings) -> Embedder:
    """The embedder the settings describe: one instance per configuration in the process.

    Embedders are immutable values (frozen dataclasses), so the cache is keyed on every field
    that changes their behaviour (provider, model, dims, base URL, key, input limit, batch size,
    timeout, retries): settings that differ in any of them get another instance, never a
    cached one changed in place. The expensive part, the local model, is shared per model
    folder whatever the instance (:func:`loader.providers.local.load_model`)."""
    wanted = _make(settings)
    with _CACHE_LOCK:
        return _CACHE.setdefault(wanted, wanted)


def _make(settings: Settings) -> LocalEmbedder | OpenAIEmbedder:
    if settings.embedding_provider == "local":
        return LocalEmbedder(
            settings.embedding_model,
            settings.embedding_dims,
            max_input_tokens=settings.embedding_max_input_tokens or 0,
            batch_size=settings.embedding_batch_size,
            query_prompt=settings.embedding_query_prompt,
            document_prompt=settings.embedding_document_prompt,
            backend=settings.embedding_backend,
            cache_dir=str(settings.cache_path),
        )
    if settings.embedding_provider == "openai":
        return OpenAIEmbedder(
            settings.embedding_model,
            settings.embedding_dims,
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key,
            max_input_tokens=settings.embedding_max_input_tokens or OPENAI_MAX_INPUT_TOKENS,
            batch_size=settings.embedding_batch_size,
            timeout=settings.embedding_timeout,
            max_retries=settings.embedding_max_retries,
            query_prompt=settings.embedding_query_prompt or "",
            document_prompt=settings.embedding_document_prompt or "",
            request_dimensions=settings.embedding_request_dimensions,
        )
    raise ConfigError(f"unknown embedding provider {settings.embedding_provider!r}")


IDENTITY = ("query_prompt", "document_prompt", "request_dimensions")
"""What of an embedder's configuration, besides its name and dims, changes its vectors: kept in
``kb.embedding_models.config`` and compared (the backend, torch or ONNX, does not: same
vectors). ``request_dimensions`` only for API models (it is False otherwise)."""

_SETTING_OF = {
    "query_prompt": "PGKB_EMBEDDING_QUERY_PROMPT",
    "document_prompt": "PGKB_EMBEDDING_DOCUMENT_PROMPT",
    "request_dimensions": "PGKB_EMBEDDING_REQUEST_DIMENSIONS",
}
_UNSET: dict[str, Any] = {"query_prompt": "", "document_prompt": "", "request_dimensions": False}


def identity(embedder: Embedder) -> dict[str, Any]:
    """The parts of :data:`IDENTITY` ``embedder`` has, as stored in a model's config."""
    return {k: getattr(embedder, k) or _UNSET[k] for k in IDENTITY if hasattr(embedder, k)}


def identity_mismatch(config: dict[str, Any], embedder: Embedder) -> str | None:
    """How ``embedder`` differs from a registered model's ``config`` in what changes vectors
    (a model registered before prompts were recorded had none); None when it does not."""
    diffs = [
        f"{_SETTING_OF[k]}={v!r} (registered: {config.get(k, _UNSET[k])!r})"
        for k, v in identity(embedder).items()
        if config.get(k, _UNSET[k]) != v
    ]
    return "; ".join(diffs) or None
