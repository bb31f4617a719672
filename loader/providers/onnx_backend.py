"""Local embedding models on ONNX Runtime (``embedding_backend = "onnx"``, the default).

A sentence-transformers model folder is run as its configuration says, without torch,
transformers or sentence-transformers:

- **tokens**: the ``tokenizers`` library on the folder's ``tokenizer.json``, truncated at the
  model's ``max_seq_length`` (``sentence_bert_config.json``) as sentence-transformers does, the
  prompt put before the text;
- **the transformer**: an ONNX graph whose output is the token embeddings (the last hidden
  state). Where the folder ships one (``onnx/model.onnx`` or ``model.onnx``) it is used as it
  is; otherwise it is made once and cached in ``<cache_dir>/onnx/``, in a folder keyed by the
  model folder's files (a changed folder gets a new graph): built from ``model.safetensors``
  for BERT-family models (:mod:`loader.providers.bert_graph`, no torch), else exported with
  ``torch.onnx`` where torch is installed (``pip install 'pgkb[torch]'``);
- **pooling, dense layers and normalisation** in numpy, as ``modules.json``,
  ``1_Pooling/config.json`` and the ``Dense`` and ``Normalize`` modules say (every pooling mode
  of sentence-transformers, ``include_prompt``; dense layers from ``model.safetensors``).

A folder holding another module (an LSTM, a CNN, a router ...) is refused with a
:class:`~loader.errors.ConfigError` naming ``embedding_backend = "torch"``. The vectors equal
sentence-transformers' (cosine at least 0.9999, checked by the tests on tiny models of every
pooling mode and on all-MiniLM-L6-v2 with the eval's questions and the sample's chunks), so
the backend is not part of a model's identity.

Two ONNX Runtime sessions share the graph's weights (memory-mapped): a light one for queries
(no weight prepacking: ready in milliseconds) and, on the first batch of passages, one with
prepacked weights (about a tenth faster per text, a tenth of a second more to load).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import logging
import os
import re
import shutil
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loader.errors import ConfigError
from loader.providers import bert_graph

log = logging.getLogger(__name__)

GRAPH_VERSION = 2
"""Bumped when the graphs pgkb makes change: older cached graphs are made again."""
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
SHIPPED_GRAPHS = ("onnx/model.onnx", "model.onnx")
"""Where a model folder (its transformer's folder) may ship its own ONNX graph, in order."""
TORCH_HINT = "set PGKB_EMBEDDING_BACKEND=torch (after pip install 'pgkb[torch]')"

Notice = Callable[[str], None]
"""Told what is being prepared, once, when it takes a while (a graph being built)."""


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read {file}: {exc}", hint="check the model folder (PGKB_EMBEDDING_MODEL)"
        ) from None


def _unsupported(folder: Path, why: str) -> ConfigError:
    return ConfigError(
        f"the local model in {folder} cannot run on ONNX Runtime: {why}", hint=TORCH_HINT
    )


# --- what the folder's configuration says --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Dense:
    """A sentence-transformers ``Dense`` module: ``activation(x @ weight.T + bias)``, plus
    ``x`` (or ``x @ residual.T``) when it has a residual connection."""

    weight: Any
    bias: Any | None
    activation: str
    """``identity``, ``tanh``, ``relu`` or ``sigmoid``."""
    residual: Any | None = None
    """The residual projection (``use_residual`` with another width), or None."""
    use_residual: bool = False

    def __call__(self, x: Any) -> Any:
        import numpy as np

        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        if self.activation == "tanh":
            y = np.tanh(y)
        elif self.activation == "relu":
            y = np.maximum(y, 0)
        elif self.activation == "sigmoid":
            y = 1 / (1 + np.exp(-y))
        if self.use_residual:
            y = y + (x if self.residual is None else x @ self.residual.T)
        return y


_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A model folder's sentence-transformers pipeline, as its configuration files say."""

    folder: Path
    transformer: Path
    """The folder of its transformer (the model folder itself, or ``0_Transformer/``)."""
    max_seq_length: int | None
    do_lower_case: bool
    hidden: int
    pooling: tuple[str, ...]
    include_prompt: bool
    dense: tuple[Dense, ...]
    normalize: bool

    @property
    def dims(self) -> int:
        if self.dense:
            return int(self.dense[-1].weight.shape[0])
        return self.hidden * len(self.pooling)


def _kind(module: dict[str, Any]) -> str:
    """``Transformer``, ``Pooling``, ... from a ``modules.json`` entry's class path."""
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def read_pipeline(folder: Path) -> Pipeline:
    """The pipeline of the sentence-transformers model in ``folder`` (a plain Hugging Face
    folder without ``modules.json``: its transformer with mean pooling, as
    sentence-transformers loads it). :class:`ConfigError` for a module ONNX Runtime does not
    run here."""
    modules = _read_json(folder / "modules.json")
    if modules is None:
        modules = [
            {"type": "Transformer", "path": ""},
            {"type": "Pooling", "path": None},
        ]
    if not isinstance(modules, list) or not modules or _kind(modules[0]) != "Transformer":
        raise _unsupported(folder, "its modules.json does not start with a Transformer module")
    transformer = folder / str(modules[0].get("path") or "")
    config = _read_json(transformer / "config.json") or {}
    st_config = _read_json(transformer / "sentence_bert_config.json") or {}
    hidden = int(config.get("hidden_size") or config.get("d_model") or 0)
    max_seq = st_config.get("max_seq_length")
    pooling: tuple[str, ...] = ("mean",)
    include_prompt = True
    dense: list[Dense] = []
    normalize = False
    for module in modules[1:]:
        kind = _kind(module)
        path = folder / str(module.get("path") or "")
        if kind == "Pooling":
            pooling, include_prompt, hidden = _pooling(path, module, hidden)
        elif kind == "Dense":
            dense.append(_dense(folder, path))
        elif kind == "Normalize":
            normalize = True
        elif kind == "Dropout":  # nothing at inference
            continue
        else:
            raise _unsupported(folder, f"its {kind or 'unnamed'} module ({module.get('type')})")
    if hidden <= 0:
        raise _unsupported(folder, "its hidden size is not in config.json")
    return Pipeline(
        folder=folder,
        transformer=transformer,
        max_seq_length=int(max_seq) if isinstance(max_seq, int) and max_seq > 0 else None,
        do_lower_case=bool(st_config.get("do_lower_case", False)),
        hidden=hidden,
        pooling=pooling,
        include_prompt=include_prompt,
        dense=tuple(dense),
        normalize=normalize,
    )


def _pooling(path: Path, module: dict[str, Any], hidden: int) -> tuple[tuple[str, ...], bool, int]:
    config = _read_json(path / "config.json") if module.get("path") else None
    config = config or {}
    raw = config.get("pooling_mode")
    if raw is None:
        modes = tuple(mode for key, mode in _LEGACY_POOLING.items() if config.get(key))
        modes = modes or ("mean",)
    else:
        modes = (raw,) if isinstance(raw, str) else tuple(raw)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise _unsupported(path.parent, f"pooling mode {unknown[0]!r}")
    width = config.get("embedding_dimension") or config.get("word_embedding_dimension") or hidden
    return modes, bool(config.get("include_prompt", True)), int(width)


def _dense(folder: Path, path: Path) -> Dense:
    config = _read_json(path / "config.json") or {}
    activation = _ACTIVATIONS.get(str(config.get("activation_function", "")))
    if activation is None:
        raise _unsupported(
            folder, f"a Dense module's activation {config.get('activation_function')}"
        )
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, "sentence_embedding") not in ("sentence_embedding", None):
            raise _unsupported(folder, f"a Dense module reading or writing {config[key]!r}")
    weights_file = path / "model.safetensors"
    if not weights_file.is_file():
        raise _unsupported(folder, f"a Dense module without model.safetensors in {path}")
    tensors = bert_graph.read_safetensors(weights_file)
    weight = tensors.get("linear.weight")
    if weight is None:
        raise _unsupported(folder, f"{weights_file} holds no linear.weight")
    residual = bool(config.get("use_residual", False))
    return Dense(
        weight, tensors.get("linear.bias"), activation, tensors.get("residual.weight"), residual
    )


# --- the graph -----------------------------------------------------------------------------------


def folder_digest(folder: Path) -> str:
    """A digest of every file of ``folder`` (relative path, size, modification time) and of
    :data:`GRAPH_VERSION`: a changed model folder gets another graph."""
    digest = hashlib.sha256(f"v{GRAPH_VERSION}:{folder.resolve()}".encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def shipped_graph(pipeline: Pipeline) -> Path | None:
    """The ONNX graph the model folder ships, if any."""
    for name in SHIPPED_GRAPHS:
        for base in dict.fromkeys((pipeline.transformer, pipeline.folder)):
            if (base / name).is_file():
                return base / name
    return None


def cached_graph(pipeline: Pipeline, cache_dir: Path, notice: Notice | None = None) -> Path:
    """The graph of ``pipeline``'s transformer in ``cache_dir`` (``<cache_dir>/<model>-<digest>/
    model.onnx``), made first when missing: built in a temporary folder renamed into place, so
    a concurrent run or an interrupted one never leaves half a graph."""
    folder = pipeline.folder
    name = folder.parent.name if folder.name == "model" else folder.name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:40] or "model"
    target = cache_dir / f"{slug}-{folder_digest(folder)}"
    graph = target / "model.onnx"
    if graph.is_file() and (target / "meta.json").is_file():
        return graph
    partial = cache_dir / f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        how = _make_graph(pipeline, partial / "model.onnx", notice)
        meta = {"made_by": how, "folder": str(folder), "graph_version": GRAPH_VERSION}
        (partial / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        try:
            partial.rename(target)
        except OSError:  # another run made it first: use theirs
            if not graph.is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return graph


def _make_graph(pipeline: Pipeline, target: Path, notice: Notice | None) -> str:
    """Write the transformer's graph to ``target``; returns how it was made."""
    folder = pipeline.transformer
    config = _read_json(folder / "config.json") or {}
    why = bert_graph.supported(config)
    if why is None:
        _require("onnx", "to build the model's graph")
        if notice:
            notice(f"building the ONNX graph of the model in {pipeline.folder} (once, seconds)")
        bert_graph.build(folder, target)
        return "bert_graph"
    try:
        import torch  # noqa: F401
    except ImportError:
        raise _unsupported(
            pipeline.folder,
            f"it ships no ONNX graph and pgkb builds graphs without torch only for BERT-family "
            f"models, not {why}",
        ) from None
    if notice:
        notice(f"exporting the model in {pipeline.folder} to ONNX with torch (once, a few seconds)")
    _torch_export(folder, target)
    return "torch.onnx"


def _torch_export(folder: Path, target: Path) -> None:
    """Export the Hugging Face model in ``folder`` (its last hidden state) with ``torch.onnx``,
    the weights in a file beside the graph."""
    import onnx
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()
    accepted = inspect.signature(model.forward).parameters
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted]
    if "token_type_ids" in names and not getattr(model.config, "type_vocab_size", 0):
        names.remove("token_type_ids")
    example = {
        "input_ids": torch.tensor([[1, 2, 3, 4], [1, 2, 3, 0]]),  # in any vocabulary
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "token_type_ids": torch.zeros((2, 4), dtype=torch.long),
    }

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            out = self.model(**dict(zip(names, inputs, strict=True)))
            return out[0]  # type: ignore[no-any-return]

    plain = target.with_suffix(".torch.onnx")
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's warnings about Python control flow
        torch.onnx.export(
            Encoder().eval(),
            tuple(example[n] for n in names),
            str(plain),
            input_names=names,
            output_names=["token_embeddings"],
            dynamic_axes={**axes, "token_embeddings": {0: "batch", 1: "sequence"}},
            opset_version=17,
            dynamo=False,
        )
    graph = onnx.load(str(plain))
    onnx.save_model(
        graph,
        str(target),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=target.name + ".data",
    )
    plain.unlink()


def _require(module: str, why: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"the local embedding model needs the {module} package ({why})",
            hint="reinstall pgkb (pip install pgkb) to get its dependencies",
        ) from None


# --- running it ----------------------------------------------------------------------------------


def load_tokenizer(folder: Path, max_length: int) -> Any:
    """The model's fast tokenizer (``tokenizer.json``), truncating at ``max_length`` tokens
    (special tokens included) and padding to the longest text of a batch."""
    from tokenizers import Tokenizer

    file = folder / "tokenizer.json"
    if not file.is_file():
        raise ConfigError(
            f"the local model in {folder} has no tokenizer.json, which the ONNX backend reads",
            hint="save the model with a fast tokenizer (tokenizer.json), or " + TORCH_HINT,
        )
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()  # batches are padded by OnnxSentenceModel
    return tokenizer


def _pad_id(folder: Path, tokenizer: Any) -> int:
    """The id of the model's padding token (``tokenizer_config.json``, else ``[PAD]``/``<pad>``,
    else 0)."""
    config = _read_json(folder / "tokenizer_config.json") or {}
    names = [config.get("pad_token"), "[PAD]", "<pad>"]
    for name in names:
        if isinstance(name, dict):
            name = name.get("content")
        if isinstance(name, str):
            found = tokenizer.token_to_id(name)
            if found is not None:
                return int(found)
    return 0


class OnnxSentenceModel:
    """A sentence-transformers model folder run by ONNX Runtime (see the module's docstring);
    ``encode`` as ``SentenceTransformer.encode`` for what pgkb asks of it."""

    def __init__(self, pipeline: Pipeline, graph: Path, max_seq_length: int) -> None:
        import onnxruntime  # noqa: F401 - a missing runtime is reported here, at load

        self.pipeline = pipeline
        self.graph = graph
        self.max_seq_length = max_seq_length
        self.tokenizer = load_tokenizer(pipeline.transformer, max_seq_length)
        self.pad_id = _pad_id(pipeline.transformer, self.tokenizer)
        self._sessions: dict[bool, Any] = {}
        self._lock = threading.Lock()
        self._prompt_lengths: dict[str, int] = {}
        self.inputs = [i.name for i in self.session(bulk=False).get_inputs()]
        known = {"input_ids", "attention_mask", "token_type_ids"}
        if not set(self.inputs) <= known or "input_ids" not in self.inputs:
            raise _unsupported(
                pipeline.folder, f"its ONNX graph {graph} takes inputs {', '.join(self.inputs)}"
            )
        outputs = self.session(bulk=False).get_outputs()
        self.output = next(
            (o.name for o in outputs if o.name in ("token_embeddings", "last_hidden_state")),
            outputs[0].name,
        )
        self.pooled = self.output == "sentence_embedding"
        """The graph is a whole pipeline already (pooling and all): its output is used as is."""

    @classmethod
    def load(
        cls,
        folder: Path,
        cache_dir: str | os.PathLike[str],
        *,
        max_seq_length: int,
        notice: Notice | None = None,
    ) -> OnnxSentenceModel:
        """The model in ``folder``: its shipped graph, else the one cached in ``cache_dir``
        (made first when missing or stale)."""
        _require("onnxruntime", "to run the model")
        pipeline = read_pipeline(folder)
        graph = shipped_graph(pipeline) or cached_graph(pipeline, Path(cache_dir), notice)
        return cls(pipeline, graph, max_seq_length)

    def session(self, *, bulk: bool) -> Any:
        """The ONNX Runtime session: ``bulk`` with prepacked weights (faster per text), else
        the light one (ready in milliseconds). Both: no spinning threads (the machine may be
        shared), the CPU's cores."""
        with self._lock:
            session = self._sessions.get(bulk)
            if session is None:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.log_severity_level = 3
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                if not bulk:
                    options.add_session_config_entry("session.disable_prepacking", "1")
                session = ort.InferenceSession(
                    str(self.graph), options, providers=["CPUExecutionProvider"]
                )
                self._sessions[bulk] = session
        return session

    def get_sentence_embedding_dimension(self) -> int:
        return self.pipeline.dims

    def prompt_length(self, prompt: str) -> int:
        """Tokens of ``prompt`` that pooling leaves out when ``include_prompt`` is false: its
        tokens with the leading special token, without a trailing one (as sentence-transformers
        counts them)."""
        if prompt not in self._prompt_lengths:
            encoding = self.tokenizer.encode(prompt)
            length = len(encoding.ids)
            if length and encoding.special_tokens_mask[-1]:
                length -= 1
            self._prompt_lengths[prompt] = length
        return self._prompt_lengths[prompt]

    def encode(
        self,
        texts: Sequence[str],
        *,
        prompt: str = "",
        batch_size: int = 32,
        normalize_embeddings: bool = True,
        bulk: bool = True,
        **_: Any,
    ) -> Any:
        """Vectors of ``texts`` (``prompt`` put before each), a float32 array in input order;
        batched by similar length."""
        import numpy as np

        inputs = [prompt + t for t in texts]
        if self.pipeline.do_lower_case:
            inputs = [t.lower() for t in inputs]
        encodings = self.tokenizer.encode_batch(inputs)
        skip = 0 if self.pipeline.include_prompt or not prompt else self.prompt_length(prompt)
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        out = np.zeros((len(encodings), self.pipeline.dims), dtype=np.float32)
        session = self.session(bulk=bulk)
        for start in range(0, len(order), max(1, batch_size)):
            batch = order[start : start + batch_size]
            out[batch] = self._run(session, [encodings[i] for i in batch], skip)
        if normalize_embeddings or self.pipeline.normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, 1e-12)
        return out

    def _run(self, session: Any, encodings: list[Any], skip: int) -> Any:
        import numpy as np

        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
            types[row, : len(e.ids)] = e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        result = session.run([self.output], {n: feed[n] for n in self.inputs})[0]
        if self.pooled:
            return result
        pooled = pool(result.astype(np.float32), mask, self.pipeline.pooling, skip)
        for layer in self.pipeline.dense:
            pooled = layer(pooled)
        return pooled


def pool(tokens: Any, mask: Any, modes: Sequence[str], skip: int = 0) -> Any:
    """Sentence vectors from token embeddings ``tokens`` (batch, seq, hidden) and the 0/1
    attention ``mask`` (right-padded), every mode of sentence-transformers' ``Pooling``,
    concatenated in order; ``skip``: leading tokens (a prompt's) left out of the pooling."""
    import numpy as np

    original = mask
    if skip:
        mask = mask.copy()
        mask[:, :skip] = 0
    weights = mask[..., None].astype(np.float32)
    batch, seq = tokens.shape[:2]
    out = []
    for mode in modes:
        if mode == "cls":
            first = mask.argmax(axis=1)
            out.append(tokens[np.arange(batch), first])
        elif mode == "max":
            out.append(np.where(weights > 0, tokens, -np.inf).max(axis=1))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = (tokens * weights).sum(axis=1)
            count = np.maximum(weights.sum(axis=1), 1e-9)
            out.append(total / (count if mode == "mean" else np.sqrt(count)))
        elif mode == "weightedmean":
            pad = original.argmax(axis=1)  # leading padding (none when right-padded)
            positions = np.arange(1, seq + 1, dtype=np.float32)[None, :] - pad[:, None]
            weighted = weights * positions[..., None]
            total = (tokens * weighted).sum(axis=1)
            out.append(total / np.maximum(weighted.sum(axis=1), 1e-9))
        elif mode == "lasttoken":
            flipped = mask[:, ::-1]
            values, index = flipped.max(axis=1), flipped.argmax(axis=1)
            index = np.where(values == 0, seq - 1, index)
            last = seq - index - 1
            out.append((tokens * weights)[np.arange(batch), last])
    return np.concatenate(out, axis=-1) if len(out) > 1 else out[0]
