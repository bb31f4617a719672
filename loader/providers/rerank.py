"""Rerankers: the optional last step of retrieval (``rerank_provider``, off by default).

Two implementations of :class:`Reranker`, both immutable and cached per configuration by
:func:`get_reranker`:

- :class:`ApiReranker` (``api``): ``POST {rerank_base_url}/rerank`` with ``model``, ``query``,
  ``documents`` and ``top_n``, answered by ``results: [{index, relevance_score}]``, the shape
  Cohere, Jina, Text Embeddings Inference and vLLM serve (a bare list, and ``score`` for
  ``relevance_score``, are read too). Sent through the shared OpenAI-compatible layer
  (:mod:`loader.providers.openai_compat`): its retries (429, 408, 5xx, timeouts, lost
  connections; ``Retry-After`` honoured), timeouts and errors naming the endpoint and the
  ``PGKB_RERANK_*`` setting. Every reply is checked: indices in range and unique, scores finite
  numbers, as many results as asked for.
- :class:`LocalReranker` (``local``): a sentence-transformers ``CrossEncoder`` from a folder or
  a Hugging Face Hub name (resolved as local embedding models are,
  :func:`loader.providers.local.model_folder`), loaded once per process, bounded by
  ``rerank_timeout``.

Any failure is a :class:`RerankError`; :func:`loader.search.search` then keeps the fused order
and says so.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

from loader.errors import ConfigError, PgkbError
from loader.providers import openai_compat
from loader.providers.local import model_folder
from loader.safety import call_with_timeout
from loader.settings import Settings


class RerankError(PgkbError):
    """The reranker could not be reached or gave an unusable reply."""


@dataclasses.dataclass(frozen=True)
class Ranked:
    """One reranked document: its position in the list given, and the reranker's score."""

    index: int
    score: float


class Reranker(Protocol):
    """Orders documents by relevance to a query."""

    @property
    def model(self) -> str: ...

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[Ranked]:
        """The best ``top_n`` of ``documents`` for ``query``, best first."""
        ...


def best_first(scores: Sequence[tuple[int, float]], top_n: int) -> list[Ranked]:
    """``(index, score)`` pairs as :class:`Ranked`, best score first (ties: the given order,
    which is the fused one), at most ``top_n``."""
    ordered = sorted(scores, key=lambda pair: (-pair[1], pair[0]))
    return [Ranked(i, s) for i, s in ordered[:top_n]]


@dataclasses.dataclass(frozen=True)
class ApiReranker:
    """A ``POST /rerank`` endpoint (Cohere, Jina, Text Embeddings Inference, vLLM)."""

    provider: ClassVar[str] = "api"

    model: str
    base_url: str
    api_key: str | None = dataclasses.field(default=None, repr=False)
    timeout: float = 30.0
    max_retries: int = 2
    sleep: Callable[[float], None] = dataclasses.field(default=time.sleep, repr=False)

    @functools.cached_property
    def client(self) -> Any:
        return openai_compat.make_client(
            base_url=self.base_url, api_key=self.api_key, timeout=self.timeout
        )

    @property
    def endpoint(self) -> openai_compat.Endpoint:
        return openai_compat.Endpoint(
            "the rerank API",
            self.base_url,
            self.model,
            self.timeout,
            "PGKB_RERANK",
            on_give_up="; the results keep the fused order",
        )

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[Ranked]:
        if not documents:
            return []
        top_n = max(1, min(top_n, len(documents)))
        body = {"model": self.model, "query": query, "documents": list(documents), "top_n": top_n}
        policy = openai_compat.RetryPolicy(self.max_retries, sleep=self.sleep)
        try:
            reply = openai_compat.call(
                lambda: self.client.post("/rerank", cast_to=object, body=body),
                self.endpoint,
                policy,
                error=RerankError,
            )
        except RerankError:
            raise
        except Exception as exc:  # a body that is not JSON, ...
            raise self._invalid(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        return self.parse(reply, len(documents), top_n)

    def _invalid(self, why: str) -> RerankError:
        return RerankError(
            f"{self.endpoint} sent a reply pgkb cannot use: {why}",
            hint="check PGKB_RERANK_BASE_URL serves POST /rerank ({model, query, documents, "
            "top_n} -> {results: [{index, relevance_score}]})",
        )

    def parse(self, reply: Any, count: int, top_n: int) -> list[Ranked]:
        """The checked results of a reply for ``count`` documents, best first."""
        results = reply.get("results") if isinstance(reply, dict) else reply
        if not isinstance(results, list):
            raise self._invalid("no 'results' list")
        scores: list[tuple[int, float]] = []
        seen: set[int] = set()
        for item in results:
            if not isinstance(item, dict):
                raise self._invalid(f"a result is not an object: {item!r:.80}")
            index = item.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                raise self._invalid(f"a result has no integer index: {item!r:.80}")
            if not 0 <= index < count:
                raise self._invalid(f"index {index} is out of range (0..{count - 1})")
            if index in seen:
                raise self._invalid(f"index {index} appears twice")
            seen.add(index)
            score = item.get("relevance_score", item.get("score"))
            if (
                not isinstance(score, int | float)
                or isinstance(score, bool)
                or not math.isfinite(score)
            ):
                raise self._invalid(f"the score of index {index} is not a number: {score!r:.40}")
            scores.append((index, float(score)))
        if len(scores) < top_n:
            raise self._invalid(f"{len(scores)} results for top_n={top_n} of {count} documents")
        return best_first(scores, top_n)


_CROSS_ENCODERS: dict[str, Any] = {}
_CROSS_ENCODERS_LOCK = threading.Lock()


def load_cross_encoder(folder: str) -> Any:
    """The ``CrossEncoder`` in ``folder``, loaded once per process (never from the network)."""
    with _CROSS_ENCODERS_LOCK:
        model = _CROSS_ENCODERS.get(folder)
        if model is None:
            try:
                from sentence_transformers import CrossEncoder
            except ImportError:
                raise ConfigError(
                    "rerank_provider = 'local' needs sentence-transformers and torch, which are "
                    "not installed",
                    hint="pip install 'pgkb[torch]', or use rerank_provider = 'api'",
                ) from None
            try:
                model = CrossEncoder(folder, device="cpu", local_files_only=True)
            except (OSError, ValueError) as exc:
                raise RerankError(
                    f"cannot load the cross-encoder in {folder}: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:300]}",
                    hint="check PGKB_RERANK_MODEL names a sentence-transformers CrossEncoder",
                ) from None
            _CROSS_ENCODERS[folder] = model
    return model


@dataclasses.dataclass(frozen=True)
class LocalReranker:
    """A sentence-transformers ``CrossEncoder`` on the CPU, from a folder or a Hub name."""

    provider: ClassVar[str] = "local"

    model: str
    timeout: float = 30.0
    batch_size: int = 32

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[Ranked]:

        if not documents:
            return []
        folder = str(model_folder(self.model, setting="rerank_model"))

        def score() -> Any:
            return load_cross_encoder(folder).predict(
                [(query, d) for d in documents],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
            )

        try:
            raw = call_with_timeout(score, self.timeout)
        except TimeoutError:
            raise RerankError(
                f"the cross-encoder {self.model} did not finish within {self.timeout:g} s "
                "(rerank_timeout)",
                hint="raise PGKB_RERANK_TIMEOUT, or lower PGKB_RERANK_CANDIDATES",
            ) from None
        except RerankError:
            raise
        except Exception as exc:
            raise RerankError(
                f"the cross-encoder {self.model} failed: {type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        values = [float(v) for v in list(raw)]
        if len(values) != len(documents) or not all(math.isfinite(v) for v in values):
            raise RerankError(f"the cross-encoder {self.model} gave unusable scores")
        return best_first(list(enumerate(values)), max(1, min(top_n, len(documents))))


_CACHE: dict[Any, Any] = {}
_CACHE_LOCK = threading.Lock()


def get_reranker(settings: Settings) -> ApiReranker | LocalReranker | None:
    """The reranker the settings describe (None when ``rerank_provider`` is ``off``): one
    instance per configuration in the process."""
    wanted: ApiReranker | LocalReranker
    if settings.rerank_provider == "off" or not settings.rerank_model:
        return None
    if settings.rerank_provider == "api":
        wanted = ApiReranker(
            settings.rerank_model,
            str(settings.rerank_base_url),
            api_key=settings.rerank_api_key,
            timeout=settings.rerank_timeout,
            max_retries=settings.rerank_max_retries,
        )
    else:
        wanted = LocalReranker(settings.rerank_model, timeout=settings.rerank_timeout)
    with _CACHE_LOCK:
        found: ApiReranker | LocalReranker = _CACHE.setdefault(wanted, wanted)
    return found
