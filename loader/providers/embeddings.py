"""The embedding interface, the embedder the settings describe, and the database's model check.

Two implementations of :class:`Embedder`: :class:`~loader.providers.local.LocalEmbedder`
(all-MiniLM-L6-v2 on the CPU, offline) and
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
from loader.providers.openai_embeddings import OpenAIEmbedder
from loader.settings import Settings


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


def check_chunk_size(settings: Settings, embedder: Embedder) -> None:
    """Raise :class:`ConfigError` unless a chunk plus the model's special tokens fits its input.

    A chunk longer than the model reads would be silently truncated by it: that is a
    configuration error, reported before any work starts.
    """
    extra = special_tokens(embedder)
    limit = embedder.max_input_tokens
    reads = getattr(embedder, "model_max_tokens", None)
    if reads is not None and limit > reads:
        raise ConfigError(
            f"embedding_max_input_tokens={limit} exceeds what {embedder.name} reads "
            f"({reads} tokens): longer inputs would be silently truncated",
            hint=f"set PGKB_EMBEDDING_MAX_INPUT_TOKENS to at most {reads}",
        )
    if settings.chunk_tokens + extra > limit:
        raise ConfigError(
            f"chunk_tokens={settings.chunk_tokens} plus the {extra} special tokens of "
            f"{embedder.name} exceeds its input limit of {limit} tokens "
            "(the model would silently truncate every long chunk)",
            hint=f"set PGKB_CHUNK_TOKENS to at most {limit - extra}",
        )


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
            max_input_tokens=settings.embedding_max_input_tokens,
            batch_size=settings.embedding_batch_size,
        )
    if settings.embedding_provider == "openai":
        return OpenAIEmbedder(
            settings.embedding_model,
            settings.embedding_dims,
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key,
            max_input_tokens=settings.embedding_max_input_tokens,
            batch_size=settings.embedding_batch_size,
            timeout=settings.embedding_timeout,
            max_retries=settings.embedding_max_retries,
        )
    raise ConfigError(f"unknown embedding provider {settings.embedding_provider!r}")


def ensure_model(
    conn: psycopg.Connection[Any], embedder: Embedder, hnsw: tuple[int, int] | None = None
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
        conn.commit()
        return row.id
    # what pgkb needs to embed with it again (kb.embedding_models.config; never an API key), and
    # hnsw: (m, ef_construction) of the model's index, None = pgvector's defaults
    config: dict[str, Any] = {"max_input_tokens": embedder.max_input_tokens}
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
