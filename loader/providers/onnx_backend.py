"""The ONNX Runtime backend of local embedding models (``embedding_backend = "onnx"``).

The whole sentence-transformers pipeline of a model folder (transformer, pooling, dense layers,
normalisation) is exported once with ``torch.onnx`` into one graph whose output is the sentence
embedding, kept in a cache folder keyed by the model folder's files (a changed model is exported
again); later runs load the export with ONNX Runtime and the model's own tokenizer, without
loading torch weights. The vectors are the torch model's (cosine >= 0.999,
``tests/unit/test_local_models.py``; docs/measurements/models.md), so the backend is not part of a
model's identity. Needs the ``onnx`` package for the export (``pip install 'pgkb[onnx]'``);
``onnxruntime`` to run it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import platformdirs

from loader.errors import ConfigError

log = logging.getLogger(__name__)

EXPORT_VERSION = 1
"""Bumped when the export changes: older exports are made again."""


def default_cache_dir() -> Path:

    return platformdirs.user_cache_path("pgkb") / "onnx"


def folder_digest(folder: Path) -> str:
    """A digest of every file of ``folder`` (relative path, size, modification time)."""
    digest = hashlib.sha256(f"v{EXPORT_VERSION}:{folder.resolve()}".encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def _require(module: str, why: str) -> Any:

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"embedding_backend = 'onnx' needs the {module} package ({why})",
            hint="pip install 'pgkb[onnx]' (onnx, onnxruntime), "
            "or set PGKB_EMBEDDING_BACKEND=torch",
        ) from None


def _include_prompt(folder: Path) -> bool:
    """Whether the model's pooling averages over the prompt's tokens too (the usual case)."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        for module in modules:
            if str(module.get("type", "")).endswith("Pooling"):
                config = folder / module.get("path", "") / "config.json"
                return bool(json.loads(config.read_text(encoding="utf-8")).get("include_prompt", 1))
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return True


def export(folder: Path, target: Path, load_torch: Callable[[], Any]) -> dict[str, Any]:
    """Export the sentence-transformers model in ``folder`` (``load_torch()`` loads it) to
    ``target/model.onnx`` (written under a temporary name, then renamed) with its
    ``meta.json``; returns the meta."""
    import torch

    _require("onnx", "to export the model")
    model = load_torch().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tokenize() is deprecated in newer versions
        prepare = getattr(model, "preprocess", None) or model.tokenize
        features = prepare(["an example sentence", "another"])
    names = [
        k
        for k, v in features.items()
        if isinstance(v, torch.Tensor) and v.dim() == 2 and not v.is_floating_point()
    ]

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            out = self.model(dict(zip(names, inputs, strict=True)))
            return out["sentence_embedding"]  # type: ignore[no-any-return]

    target.mkdir(parents=True, exist_ok=True)
    partial = target / f"model.onnx.{os.getpid()}.tmp"
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's warnings about Python control flow
        torch.onnx.export(
            Pipeline().eval(),
            tuple(features[n] for n in names),
            str(partial),
            input_names=names,
            output_names=["sentence_embedding"],
            dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    dims = (
        model.get_embedding_dimension()
        if hasattr(model, "get_embedding_dimension")
        else (model.get_sentence_embedding_dimension())
    )
    meta = {
        "inputs": names,
        "dims": int(dims),
        "max_seq_length": int(model.max_seq_length or 512),
        "do_lower_case": bool(getattr(model[0], "do_lower_case", False)),
        "include_prompt": _include_prompt(folder),
        "folder": str(folder),
    }
    (target / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    partial.replace(target / "model.onnx")
    return meta


@dataclasses.dataclass
class OnnxSentenceModel:
    """A sentence-transformers model exported to ONNX, run by ONNX Runtime; ``encode`` as
    ``SentenceTransformer.encode`` for what pgkb asks of it."""

    session: Any
    tokenizer: Any
    meta: dict[str, Any]
    path: Path

    @classmethod
    def load(
        cls,
        folder: Path,
        load_torch: Callable[[], Any],
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> OnnxSentenceModel:
        """The export of ``folder`` from ``cache_dir`` (made first, from the torch model
        ``load_torch()`` loads, when missing or stale)."""
        ort = _require("onnxruntime", "to run the model")
        from transformers import AutoTokenizer

        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", folder.name)[:40] or "model"
        target = Path(cache_dir or default_cache_dir()) / f"{slug}-{folder_digest(folder)}"
        if (target / "model.onnx").is_file() and (target / "meta.json").is_file():
            meta = json.loads((target / "meta.json").read_text(encoding="utf-8"))
        else:
            log.info("exporting %s to ONNX in %s", folder, target)
            meta = export(folder, target, load_torch)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(
            str(target / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        return cls(session, tokenizer, meta, target / "model.onnx")

    @property
    def max_seq_length(self) -> int:
        return int(self.meta["max_seq_length"])

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.meta["dims"])

    def encode(
        self,
        texts: Sequence[str],
        *,
        prompt: str = "",
        batch_size: int = 32,
        normalize_embeddings: bool = True,
        **_: Any,
    ) -> Any:
        """Vectors of ``texts`` (``prompt`` put before each), batched by similar length."""
        import numpy as np

        if prompt and not self.meta.get("include_prompt", True):
            raise ConfigError(
                "this model's pooling leaves its prompt's tokens out, which the ONNX backend "
                "does not do",
                hint="set PGKB_EMBEDDING_BACKEND=torch for this model",
            )
        inputs = [prompt + t for t in texts]
        if self.meta.get("do_lower_case"):
            inputs = [t.lower() for t in inputs]
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))
        out = np.zeros((len(inputs), self.get_sentence_embedding_dimension()), dtype=np.float32)
        for start in range(0, len(order), max(1, batch_size)):
            batch = order[start : start + batch_size]
            encoded = self.tokenizer(
                [inputs[i] for i in batch],
                padding=True,
                truncation=True,
                max_length=self.max_seq_length,
                return_tensors="np",
            )
            feed = {n: np.asarray(encoded[n], dtype=np.int64) for n in self.meta["inputs"]}
            out[batch] = self.session.run(None, feed)[0]
        if normalize_embeddings:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, 1e-12)
        return out
