"""An ONNX graph of a BERT-family encoder, built from its ``model.safetensors`` without torch.

The graph is the transformer of a sentence-transformers model: ``input_ids``,
``attention_mask`` and ``token_type_ids`` in, ``token_embeddings`` (the last hidden state) out;
pooling, dense layers and normalisation follow in :mod:`loader.providers.onnx_backend`, as
the model folder's configuration says. It is written with the ``onnx`` package's helper API,
node by node as ``transformers``' ``BertModel`` computes (embeddings, then per layer
self-attention, its output and the feed-forward block, each followed by a residual
LayerNorm), in standard operators only; ONNX Runtime fuses them when it loads the graph.
The vectors equal the torch model's (``tests/unit/test_onnx_graph.py`` against a tiny BERT,
``tests/acceptance/test_onnx_default_model.py`` against all-MiniLM-L6-v2).

Checkpoints store weights in float32, float16 or bfloat16; all are read as float32 (numpy has
no bfloat16, so :func:`read_safetensors` reads the format itself: an 8-byte header length, a
JSON header, then the raw tensors).
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from pathlib import Path
from typing import Any

from loader.errors import ConfigError

SUPPORTED_TYPES = ("bert",)
"""``model_type`` values (``config.json``) this builder reads: BERT and the models that share
its layout (MiniLM, BGE, E5, GTE, Arctic Embed ...)."""
ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu")
OPSET = 17
MS_DOMAIN = "com.microsoft"
"""LayerNormalization is a standard operator from opset 17 on."""

_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "F64": ("<f8", 8), "BF16": ("<u2", 2)}


class UnsupportedModel(ConfigError):
    """The folder's model is not one this builder can turn into a graph."""


def read_safetensors(file: Path) -> dict[str, Any]:
    """Every floating-point tensor of a ``.safetensors`` file as a float32 numpy array
    (integer tensors, such as stored position ids, are skipped)."""
    import numpy as np

    with file.open("rb") as handle:
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        (size,) = struct.unpack("<Q", buffer[:8])
        header = json.loads(buffer[8 : 8 + size])
        base = 8 + size
        tensors: dict[str, Any] = {}
        for name, info in header.items():
            if name == "__metadata__" or info.get("dtype") not in _DTYPES:
                continue
            dtype, width = _DTYPES[info["dtype"]]
            start, end = info["data_offsets"]
            count = (end - start) // width
            raw = np.frombuffer(buffer, dtype=dtype, count=count, offset=base + start)
            if info["dtype"] == "BF16":  # the upper half of a float32
                array = (raw.astype(np.uint32) << 16).view(np.float32)
            else:
                array = raw.astype(np.float32)  # a copy: the map can be closed
            del raw  # no view of the map may outlive it
            tensors[name] = array.reshape(info["shape"])
        return tensors
    finally:
        buffer.close()


def supported(config: dict[str, Any]) -> str | None:
    """Why the model of ``config`` (its ``config.json``) cannot be built here; None if it can."""
    kind = config.get("model_type")
    if kind not in SUPPORTED_TYPES:
        return f"model_type {kind!r} (this builder reads {', '.join(SUPPORTED_TYPES)})"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type {config.get('position_embedding_type')!r}"
    if config.get("hidden_act", "gelu") not in ACTIVATIONS:
        return f"hidden_act {config.get('hidden_act')!r}"
    if config.get("is_decoder") or config.get("add_cross_attention"):
        return "a decoder"
    return None


def _weights(folder: Path, layers: int) -> dict[str, Any]:
    """The encoder's weights by their ``BertModel`` names (a ``bert.`` or ``model.`` prefix,
    as task heads save them, removed; old ``gamma``/``beta`` LayerNorm names read too)."""
    file = folder / "model.safetensors"
    if not file.is_file():
        raise UnsupportedModel(
            f"the model in {folder} has no model.safetensors (only weights in that format are "
            "read without torch)"
        )
    tensors = read_safetensors(file)
    out: dict[str, Any] = {}
    for name, value in tensors.items():
        for prefix in ("bert.", "model."):
            if name.startswith(prefix) and not name.startswith(prefix + "pooler"):
                name = name[len(prefix) :]
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight")
        name = name.replace("LayerNorm.beta", "LayerNorm.bias")
        out[name] = value
    needed = [
        "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias",
    ]
    for i in range(layers):
        p = f"encoder.layer.{i}."
        needed += [
            p + f"{part}.{kind}"
            for part in (
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "attention.output.LayerNorm",
                "intermediate.dense",
                "output.dense",
                "output.LayerNorm",
            )
            for kind in ("weight", "bias")
        ]
    missing = [n for n in needed if n not in out]
    if missing:
        raise UnsupportedModel(
            f"the weights in {file} are not a BERT encoder's: {len(missing)} tensors missing "
            f"(first: {missing[0]})"
        )
    return out


class _Builder:
    """The graph's nodes and initializers, collected with fresh names, and the layers that
    make them."""

    def __init__(self, weights: dict[str, Any], heads: int, eps: float, act: str) -> None:
        self.w = weights
        self.heads = heads
        self.eps = eps
        self.act = act
        self.hidden = int(weights["embeddings.word_embeddings.weight"].shape[1])
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, value: Any) -> str:
        import numpy as np
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        value = self.w[name]
        return self.const(name, value.T.copy() if transpose else value)

    def op(self, kind: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        from onnx import helper

        out = self.name(kind.lower())
        node = helper.make_node(kind, inputs, [out], name=out, domain=domain, **attrs)
        self.nodes.append(node)
        return out

    def ms(self, kind: str, inputs: list[str], **attrs: Any) -> str:
        """A node of ONNX Runtime's ``com.microsoft`` domain."""
        return self.op(kind, inputs, domain=MS_DOMAIN, **attrs)

    # -- standard operators ------------------------------------------------------------------

    def linear(self, x: str, name: str) -> str:
        product = self.op("MatMul", [x, self.weight(name + ".weight", transpose=True)])
        return self.op("Add", [product, self.weight(name + ".bias")])

    def layer_norm(self, x: str, name: str) -> str:
        scale, bias = self.weight(name + ".weight"), self.weight(name + ".bias")
        return self.op("LayerNormalization", [x, scale, bias], epsilon=self.eps, axis=-1)

    def activation(self, x: str) -> str:
        import numpy as np

        f32 = np.float32
        if self.act == "relu":
            return self.op("Relu", [x])
        half = self.op("Mul", [x, self.const("half", f32(0.5))])
        if self.act == "gelu":  # 0.5 x (1 + erf(x / sqrt 2)), torch's exact gelu
            scaled = self.op("Mul", [x, self.const("inv_sqrt2", f32(1 / math.sqrt(2)))])
            return self.op(
                "Mul",
                [half, self.op("Add", [self.op("Erf", [scaled]), self.const("one", f32(1.0))])],
            )
        # the tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = self.op("Mul", [self.op("Mul", [x, x]), x])
        inner = self.op("Add", [x, self.op("Mul", [cube, self.const("c", f32(0.044715))])])
        scaled = self.op("Mul", [inner, self.const("k", f32(math.sqrt(2 / math.pi)))])
        return self.op(
            "Mul", [half, self.op("Add", [self.op("Tanh", [scaled]), self.const("one", f32(1.0))])]
        )

    def embeddings(self) -> str:
        """Words + positions 0..S-1 + token types, then LayerNorm."""
        import numpy as np

        i64 = np.int64
        table = self.weight("embeddings.word_embeddings.weight")
        words = self.op("Gather", [table, "input_ids"], axis=0)
        shape = self.op("Shape", ["input_ids"])
        length = self.op("Gather", [shape, self.const("one_index", i64(1))], axis=0)
        positions = self.op(
            "Range", [self.const("zero", i64(0)), length, self.const("step", i64(1))]
        )
        table = self.weight("embeddings.position_embeddings.weight")
        x = self.op("Add", [words, self.op("Gather", [table, positions], axis=0)])
        if "embeddings.token_type_embeddings.weight" in self.w:
            types = self.weight("embeddings.token_type_embeddings.weight")
            x = self.op("Add", [x, self.op("Gather", [types, "token_type_ids"], axis=0)])
        return self.layer_norm(x, "embeddings.LayerNorm")

    def standard_layers(self, x: str, layers: int) -> str:
        """The encoder layers in standard operators, as ``BertModel`` computes them."""
        import numpy as np
        from onnx import TensorProto

        f32 = np.float32
        heads, hidden = self.heads, self.hidden
        head = hidden // heads
        # the additive attention mask, (1 - mask) * the float32 minimum, as (batch, 1, 1, seq)
        kept = self.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
        masked = self.op("Sub", [self.const("one", f32(1.0)), kept])
        bias = self.op("Mul", [masked, self.const("minimum", f32(np.finfo(np.float32).min))])
        bias = self.op("Unsqueeze", [bias, self.const("axes", np.array([1, 2], dtype=np.int64))])
        split_shape = self.const("heads_shape", np.array([0, 0, heads, head], dtype=np.int64))
        merge_shape = self.const("hidden_shape", np.array([0, 0, hidden], dtype=np.int64))
        scale = self.const("scale", f32(1 / math.sqrt(head)))

        def split(t: str, perm: list[int]) -> str:  # (batch, seq, hidden) -> per head
            return self.op("Transpose", [self.op("Reshape", [t, split_shape])], perm=perm)

        for i in range(layers):
            p = f"encoder.layer.{i}."
            q = split(self.linear(x, p + "attention.self.query"), [0, 2, 1, 3])
            k = split(self.linear(x, p + "attention.self.key"), [0, 2, 3, 1])
            v = split(self.linear(x, p + "attention.self.value"), [0, 2, 1, 3])
            scores = self.op("Add", [self.op("Mul", [self.op("MatMul", [q, k]), scale]), bias])
            context = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
            merged = self.op("Transpose", [context], perm=[0, 2, 1, 3])
            context = self.op("Reshape", [merged, merge_shape])
            attended = self.linear(context, p + "attention.output.dense")
            x = self.layer_norm(self.op("Add", [attended, x]), p + "attention.output.LayerNorm")
            inner = self.activation(self.linear(x, p + "intermediate.dense"))
            out = self.linear(inner, p + "output.dense")
            x = self.layer_norm(self.op("Add", [out, x]), p + "output.LayerNorm")
        return x

    # -- ONNX Runtime's fused operators --------------------------------------------------------

    def skip_norm(self, x: str, residual: str, dense: str, norm: str) -> str:
        """LayerNorm(x + residual + the dense layer's bias)."""
        inputs = [x, residual, self.weight(norm + ".weight"), self.weight(norm + ".bias")]
        return self.ms(
            "SkipLayerNormalization", [*inputs, self.weight(dense + ".bias")], epsilon=self.eps
        )

    def fused_layers(self, x: str, layers: int) -> str:
        """The encoder layers in ONNX Runtime's fused operators: ``Attention`` (the three
        projections in one matrix, the mask as 0/1 per token), ``SkipLayerNormalization``
        (LayerNorm of input + residual + bias) and the activation with its bias."""
        import numpy as np
        from onnx import TensorProto

        mask = self.op("Cast", ["attention_mask"], to=TensorProto.INT32)
        for i in range(layers):
            p = f"encoder.layer.{i}."
            parts = [p + f"attention.self.{n}" for n in ("query", "key", "value")]
            qkv = np.concatenate([self.w[n + ".weight"].T for n in parts], axis=1)
            qkv_bias = np.concatenate([self.w[n + ".bias"] for n in parts])
            qkv_inputs = [self.const(p + "qkv.weight", qkv), self.const(p + "qkv.bias", qkv_bias)]
            context = self.ms("Attention", [x, *qkv_inputs, mask], num_heads=self.heads)
            dense = p + "attention.output.dense"
            product = self.op("MatMul", [context, self.weight(dense + ".weight", transpose=True)])
            x = self.skip_norm(product, x, dense, p + "attention.output.LayerNorm")
            name = p + "intermediate.dense"
            inner = self.op("MatMul", [x, self.weight(name + ".weight", transpose=True)])
            bias = self.weight(name + ".bias")
            if self.act == "gelu":
                inner = self.ms("BiasGelu", [inner, bias])
            elif self.act == "relu":
                inner = self.op("Relu", [self.op("Add", [inner, bias])])
            else:  # the tanh approximation
                inner = self.ms("FastGelu", [inner, bias])
            dense = p + "output.dense"
            product = self.op("MatMul", [inner, self.weight(dense + ".weight", transpose=True)])
            x = self.skip_norm(product, x, dense, p + "output.LayerNorm")
        return x


def build(folder: Path, target: Path, *, fused: bool = True) -> None:
    """Write the encoder of the BERT model in ``folder`` to ``target`` (an ``.onnx`` file).

    ``fused``: each layer in ONNX Runtime's own fused operators (``Attention``,
    ``SkipLayerNormalization``, ``BiasGelu``/``FastGelu`` of its ``com.microsoft`` domain, as its
    transformer optimizer writes them), else in standard ONNX operators only (any runtime
    reads them; ONNX Runtime runs them more slowly). :class:`UnsupportedModel` when the
    folder's model is not one this builder reads."""
    import onnx
    from onnx import TensorProto, helper

    config_file = folder / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(f"cannot read {config_file}: {exc}") from None
    why = supported(config)
    if why is not None:
        raise UnsupportedModel(f"the model in {folder} is not built without torch: {why}")
    layers = int(config["num_hidden_layers"])
    builder = _Builder(
        _weights(folder, layers),
        heads=int(config["num_attention_heads"]),
        eps=float(config.get("layer_norm_eps", 1e-12)),
        act=str(config.get("hidden_act", "gelu")),
    )
    x = builder.embeddings()
    x = builder.fused_layers(x, layers) if fused else builder.standard_layers(x, layers)
    builder.nodes.append(helper.make_node("Identity", [x], ["token_embeddings"], name="output"))

    names = ["input_ids", "attention_mask"]
    if "embeddings.token_type_embeddings.weight" in builder.w:
        names.append("token_type_ids")
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in names
    ]
    output = helper.make_tensor_value_info(
        "token_embeddings", TensorProto.FLOAT, ["batch", "sequence", builder.hidden]
    )
    graph = helper.make_graph(builder.nodes, "encoder", inputs, [output], builder.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
        producer_name="pgkb",
    )
    model.ir_version = 8  # what ONNX Runtime 1.16 and later read
    target.parent.mkdir(parents=True, exist_ok=True)
    # the weights in a file beside the graph: ONNX Runtime maps it instead of copying it (a
    # session is ready in milliseconds), and no model meets protobuf's 2 GB limit
    onnx.save_model(
        model,
        str(target),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=target.name + ".data",
        size_threshold=1024,
    )
