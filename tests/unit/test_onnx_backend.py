"""The ONNX Runtime backend against sentence-transformers on torch: the graph pgkb builds from
``model.safetensors`` (no torch), the pooling modes, prompts left out of the pooling, dense
layers, activations and narrower weight types, a graph the folder ships, the cache keyed by the
folder, and what it refuses. Every model is a tiny one the tests build (tests/tiny_models.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loader.errors import ConfigError
from loader.providers import bert_graph
from loader.providers.onnx_backend import OnnxSentenceModel, cached_graph, read_pipeline
from tests.tiny_models import build_sentence_model

TEXTS = [
    "vacuum",
    "the btree index is sorted data for range and equality",
    "a b c " * 20,  # longer than the model reads: truncated
    "query: lock",
    "",
    "wal replication backup restore",
]


def _torch_vectors(folder: Path, texts: list[str], prompt: str = "") -> Any:
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        str(folder), device="cpu", local_files_only=True, model_kwargs={"dtype": torch.float32}
    )
    return model.encode(texts, prompt=prompt, normalize_embeddings=True, convert_to_numpy=True)


def _onnx_model(folder: Path, cache: Path) -> OnnxSentenceModel:
    return OnnxSentenceModel.load(folder, cache, max_seq_length=24)


def _assert_same(a: Any, b: Any) -> None:
    cosines = (np.asarray(a) * np.asarray(b)).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert np.abs(np.asarray(a) - np.asarray(b)).max() < 1e-4


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"pooling": "cls"},
        {"pooling": "max"},
        {"pooling": "mean_sqrt_len_tokens", "normalize": False},
        {"pooling": "weightedmean"},
        {"pooling": "lasttoken"},
        {"pooling": ("cls", "mean"), "dense": 16},
        {"hidden_act": "relu", "layers": 2},
        {"hidden_act": "gelu_new"},
        {"dtype": "float16"},
        {"dtype": "bfloat16"},
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "default",
)
def test_vectors_equal_sentence_transformers(options: dict[str, Any], tmp_path: Path) -> None:
    folder = build_sentence_model(tmp_path / "model", max_seq_length=24, **options)
    model = _onnx_model(folder, tmp_path / "cache")
    _assert_same(model.encode(TEXTS), _torch_vectors(folder, TEXTS))
    _assert_same(model.encode(TEXTS, bulk=False, batch_size=2), _torch_vectors(folder, TEXTS))


def test_the_standard_operator_graph_equals_the_fused_one(tmp_path: Path) -> None:
    import onnxruntime as ort

    folder = build_sentence_model(tmp_path / "model", max_seq_length=24, layers=2)
    feeds = {
        "input_ids": np.array([[2, 20, 21, 3, 0], [2, 22, 23, 24, 3]], dtype=np.int64),
        "attention_mask": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=np.int64),
        "token_type_ids": np.zeros((2, 5), dtype=np.int64),
    }
    outputs = []
    for fused in (True, False):
        target = tmp_path / f"graph-{fused}" / "model.onnx"
        bert_graph.build(folder, target, fused=fused)
        session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, feeds)[0])
    real = feeds["attention_mask"][..., None] == 1  # padded positions are never pooled
    assert np.abs(np.where(real, outputs[0] - outputs[1], 0)).max() < 1e-5


def test_prompts_are_put_before_the_text_and_left_out_of_pooling_when_the_model_says(
    tmp_path: Path,
) -> None:
    for include in (True, False):
        folder = build_sentence_model(
            tmp_path / f"model-{include}", max_seq_length=24, include_prompt=include
        )
        model = _onnx_model(folder, tmp_path / "cache")
        got = model.encode(TEXTS, prompt="query: ")
        _assert_same(got, _torch_vectors(folder, TEXTS, prompt="query: "))
    assert model.prompt_length("query: ") == 3  # [CLS] query : (the trailing [SEP] not counted)


def test_the_graph_is_made_once_and_again_when_the_folder_changes(tmp_path: Path) -> None:
    folder = build_sentence_model(tmp_path / "model", max_seq_length=24)
    cache = tmp_path / "cache"
    first = cached_graph(read_pipeline(folder), cache)
    assert first.is_file() and (first.parent / "model.onnx.data").is_file()
    stamp = first.stat().st_mtime_ns
    assert cached_graph(read_pipeline(folder), cache) == first
    assert first.stat().st_mtime_ns == stamp  # reused, not made again
    meta = json.loads((first.parent / "meta.json").read_text())
    assert meta["made_by"] == "bert_graph"
    # new weights in the same folder: another graph, with the new weights' vectors
    build_sentence_model(tmp_path / "other", max_seq_length=24, seed=1)
    shutil.copy(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")
    second = cached_graph(read_pipeline(folder), cache)
    assert second != first
    _assert_same(_onnx_model(folder, cache).encode(TEXTS), _torch_vectors(folder, TEXTS))
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no partial folder left


def test_a_graph_the_folder_ships_is_used_as_it_is(tmp_path: Path) -> None:
    folder = build_sentence_model(tmp_path / "model", max_seq_length=24)
    (folder / "onnx").mkdir()
    bert_graph.build(folder, folder / "onnx" / "model.onnx", fused=False)
    cache = tmp_path / "cache"
    model = _onnx_model(folder, cache)
    assert model.graph == folder / "onnx" / "model.onnx"
    assert not cache.exists()  # nothing built
    _assert_same(model.encode(TEXTS), _torch_vectors(folder, TEXTS))


def test_what_the_backend_does_not_run_is_refused_with_the_torch_hint(tmp_path: Path) -> None:
    folder = build_sentence_model(tmp_path / "model", max_seq_length=24)
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(2, {"idx": 9, "name": "9", "path": "", "type": "sentence_transformers.LSTM"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ConfigError) as info:
        read_pipeline(folder)
    assert "LSTM" in info.value.message
    assert "PGKB_EMBEDDING_BACKEND=torch" in (info.value.hint or "")


def test_a_non_bert_model_without_torch_names_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    folder = build_sentence_model(tmp_path / "model", max_seq_length=24)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "mpnet"}))
    real_import = builtins.__import__

    def no_torch(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torch" or name.startswith("torch."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ConfigError) as info:
        _onnx_model(folder, tmp_path / "cache")
    assert "model_type 'mpnet'" in info.value.message
    assert "pgkb[torch]" in (info.value.hint or "")


def test_a_non_bert_model_is_exported_with_torch_where_it_is_installed(tmp_path: Path) -> None:
    # a BERT the builder does not read (its activation), which torch.onnx exports
    folder = build_sentence_model(tmp_path / "model", max_seq_length=24, hidden_act="silu")
    assert bert_graph.supported(json.loads((folder / "config.json").read_text())) is not None
    model = _onnx_model(folder, tmp_path / "cache")
    meta = json.loads((model.graph.parent / "meta.json").read_text())
    assert meta["made_by"] == "torch.onnx"
    _assert_same(model.encode(TEXTS), _torch_vectors(folder, TEXTS))
