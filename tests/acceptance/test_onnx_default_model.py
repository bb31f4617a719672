"""all-MiniLM-L6-v2 on ONNX Runtime (the default backend, the graph pgkb builds from the model's
weights without torch) gives the vectors sentence-transformers gives on torch: cosine at least
0.9999 on every question of the eval's question sets and on a sample of the sample corpus's
chunks (every 10th, as ingestion makes and embeds them), so a knowledge base embedded by either
is searched by the other, and the backend is not part of the model's identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loader.ingest.chunking import Chunker
from loader.ingest.extract import extract
from loader.providers.local import LocalEmbedder
from loader.resources import eval_dir, sample_corpus_dir
from loader.settings import Settings

pytestmark = pytest.mark.model

MIN_COSINE = 0.9999


def _questions() -> list[str]:
    found: dict[str, None] = {}
    for file in sorted(eval_dir().rglob("*.json")):
        data = json.loads(file.read_text(encoding="utf-8"))
        if isinstance(data, list):
            found.update({str(q["question"]): None for q in data if "question" in q})
    return list(found)


def _chunks(embedder: Any) -> list[str]:
    chunker = Chunker.from_settings(Settings(), embedder)
    texts = []
    for path in sorted(sample_corpus_dir().glob("*.html")):
        extracted = extract(path.read_bytes(), path)
        texts += [
            c.embed_text for c in chunker.chunk(extracted.title or path.stem, extracted.sections)
        ]
    return texts[::10]


def _cosines(a: list[list[float]], b: list[list[float]]) -> Any:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


def test_onnx_vectors_equal_torch_on_the_eval_questions_and_sample_chunks(
    embedder: Any, tmp_path: Path
) -> None:
    assert isinstance(embedder, LocalEmbedder) and embedder.backend == "onnx"
    torch = LocalEmbedder(backend="torch")
    assert torch.path() == embedder.path()  # the same model folder
    questions = _questions()
    assert len(questions) > 500  # every set: bundled, handbook, manual, FAQ
    onnx_queries = [embedder.embed_query(q) for q in questions]
    torch_queries = [torch.embed_query(q) for q in questions]
    query_cosines = _cosines(onnx_queries, torch_queries)
    assert query_cosines.min() >= MIN_COSINE, questions[int(query_cosines.argmin())]
    chunks = _chunks(embedder)
    assert len(chunks) > 200
    chunk_cosines = _cosines(embedder.embed(chunks), torch.embed(chunks))
    assert chunk_cosines.min() >= MIN_COSINE, chunks[int(chunk_cosines.argmin())][:200]
