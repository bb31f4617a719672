"""The embedding interface, the embedder the settings describe, and the database's model check.

Two implementations of :class:`Embedder`: :class:`~loader.providers.local.LocalEmbedder`
(all-MiniLM-L6-v2 on the CPU, offline, on ONNX Runtime) and
:class:`~loader.providers.openai_embeddings.OpenAIEmbedder` (any OpenAI-compatible
``/embeddings`` endpoint), both immutable. :func:`get_embedder` keeps one instance per
configuration in the process; :func:`ensure_model` registers the model in
``kb.embedding_models`` and refuses to work when the database's active model is a different one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.errors import ConfigError, ModelMismatchError
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


def ensure_model(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    hnsw: tuple[int | None, int | None] | None = None,
) -> int:
    """The id of ``embedder``'s model in ``kb.embedding_models``, registering it if new.

    Refuses (:class:`ModelMismatchError`) when the database's active model is another one:
    vectors of different models are never compared, so embedding with a model that searches do
    not use would be wasted work (switch with ``kb.activate_model`` after embedding everything
    with the new model, or fix the configuration). Commits the registration.
    """
    with conn.cursor(row_factory=class_row(queries.ModelRow)) as cur:
        row = cur.execute(queries.ACTIVE_MODEL).fetchone()
    if row is not None and (row.name, row.dims) != (embedder.name, embedder.dims):
        conn.rollback()
        raise ModelMismatchError(
            f"the configured embedding model {embedder.name} ({embedder.dims} dims) is not the "
            f"database's active model {row.name} ({row.dims} dims)",
            hint=f"set PGKB_EMBEDDING_MODEL={row.name} and PGKB_EMBEDDING_DIMS={row.dims}, or "
            "switch the database to the new model deliberately with "
            f"SELECT kb.activate_model('{embedder.name}', {embedder.dims})",
        )
    if row is not None:
        registered = conn.execute(queries.MODEL_CONFIG, (row.id,)).fetchone()
        differs = identity_mismatch(dict(registered[0] or {}) if registered else {}, embedder)
        conn.commit()
        if differs:
            raise ModelMismatchError(
                f"the configured embedding model {embedder.name} differs from the database's "
                f"active model in what changes its vectors: {differs}",
                hint="set them back to the registered values (pgkb models list --json shows "
                "them): other prompts make another vector space, which needs a fresh "
                "knowledge base or another model name",
            )
        return row.id
    # what pgkb needs to embed with it again (kb.embedding_models.config; never an API key), and
    # hnsw: (m, ef_construction) of the model's index, None = sized from the corpus
    config: dict[str, Any] = {"max_input_tokens": embedder.max_input_tokens}
    config.update({k: v for k, v in identity(embedder).items() if v})  # unset: not stored
    base_url = getattr(embedder, "base_url", None)
    if base_url:
        config["base_url"] = str(base_url)
    got = conn.execute(
        queries.REGISTER_MODEL,
        (
            embedder.name,
            embedder.dims,
            embedder.provider,
            json.dumps(config),
            *(hnsw or (None, None)),
        ),
    ).fetchone()
    conn.commit()
    assert got is not None
    return int(got[0])
