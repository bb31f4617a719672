"""Tiny models the tests build and save themselves (none is downloaded): a one-layer BERT with
a 32-wide hidden state and a WordPiece vocabulary of a few dozen words, as a sentence-transformers
embedding model and as a cross-encoder. Built in well under a second each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "with",
    "query",
    "passage",
    "document",
    "search",
    "index",
    "vacuum",
    "table",
    "postgres",
    "database",
    "row",
    "rows",
    "dead",
    "storage",
    "btree",
    "range",
    "equality",
    "sorted",
    "data",
    "lock",
    "wal",
    "replication",
    "backup",
    "restore",
    "bike",
    "choir",
    "perk",
    "policy",
    "question",
    "answer",
]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def _vocab() -> dict[str, int]:
    words = [*SPECIAL, *WORDS, *LETTERS, ":", ".", ",", "?", *(f"##{c}" for c in LETTERS)]
    return {w: i for i, w in enumerate(dict.fromkeys(words))}


def _config(vocab_size: int, max_positions: int, **extra: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(
        **{
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": max_positions,
            **extra,
        }
    )


def _tokenizer(max_length: int) -> Any:
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab=_vocab(), model_max_length=max_length)


def build_sentence_model(
    folder: Path,
    *,
    prompts: dict[str, str] | None = None,
    max_seq_length: int = 32,
    seed: int = 0,
    pooling: str | tuple[str, ...] = "mean",
    include_prompt: bool = True,
    dense: int | None = None,
    normalize: bool = True,
    hidden_act: str = "gelu",
    dtype: str | None = None,
    layers: int = 1,
) -> Path:
    """A tiny sentence-transformers model (BERT, ``pooling``, normalised) saved in ``folder``
    with ``prompts`` in its config and ``max_seq_length`` as its input limit.

    ``dense``: a Dense layer (tanh) to that many dimensions after the pooling; ``hidden_act``:
    the BERT activation; ``dtype``: the weights saved as ``float16`` or ``bfloat16``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models
    from transformers import BertModel

    torch.manual_seed(seed)
    raw = folder.parent / f"{folder.name}-bert"
    tokenizer = _tokenizer(max_seq_length)
    bert = BertModel(_config(len(tokenizer), 64, hidden_act=hidden_act, num_hidden_layers=layers))
    if dtype is not None:  # weights the narrower type holds exactly
        bert = bert.to(getattr(torch, dtype)).to(torch.float32)
    bert.save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    transformer = models.Transformer(str(raw), max_seq_length=max_seq_length)
    width = transformer.get_embedding_dimension()
    modules: list[Any] = [
        transformer,
        models.Pooling(width, pooling, include_prompt=include_prompt),
    ]
    if dense is not None:
        modes = 1 if isinstance(pooling, str) else len(pooling)
        modules.append(models.Dense(width * modes, dense))
    if normalize:
        modules.append(models.Normalize())
    model = SentenceTransformer(modules=modules, prompts=prompts or {}, device="cpu")
    model.save(str(folder))
    if dtype is not None:  # the same values, stored in the narrower type
        from safetensors.torch import load_file, save_file

        weights = load_file(folder / "model.safetensors")
        narrow = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v
                  for k, v in weights.items()}  # fmt: skip
        save_file(narrow, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def build_cross_encoder(folder: Path, *, seed: int = 0) -> Path:
    """A tiny cross-encoder (``BertForSequenceClassification``, one label) saved in ``folder``
    with its tokenizer, loadable as ``sentence_transformers.CrossEncoder``."""
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = _tokenizer(64)
    BertForSequenceClassification(_config(len(tokenizer), 128, num_labels=1)).save_pretrained(
        folder
    )
    tokenizer.save_pretrained(folder)
    return folder


def config_prompts(folder: Path) -> dict[str, str]:
    data = json.loads((folder / "config_sentence_transformers.json").read_text())
    return dict(data.get("prompts") or {})
