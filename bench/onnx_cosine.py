"""The cosine between the default model's vectors on ONNX Runtime (the graph pgkb builds from the
weights) and on PyTorch (sentence-transformers), on every question of the eval's question sets
and every 10th chunk of the sample corpus, as tests/acceptance/test_onnx_default_model.py checks
them; prints the minimum and the mean of each as JSON.

    python bench/onnx_cosine.py      (needs pgkb[torch])
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loader.providers.local import LocalEmbedder
from tests.acceptance.test_onnx_default_model import _chunks, _cosines, _questions


def main() -> None:
    onnx = LocalEmbedder(backend="onnx")
    torch = LocalEmbedder(backend="torch")
    questions = _questions()
    chunks = _chunks(onnx)
    query_cosines = _cosines(
        [onnx.embed_query(q) for q in questions], [torch.embed_query(q) for q in questions]
    )
    chunk_cosines = _cosines(onnx.embed(chunks), torch.embed(chunks))
    print(
        json.dumps(
            {
                "questions": len(questions),
                "questions_min": round(float(query_cosines.min()), 7),
                "questions_mean": round(float(query_cosines.mean()), 7),
                "chunks": len(chunks),
                "chunks_min": round(float(chunk_cosines.min()), 7),
                "chunks_mean": round(float(chunk_cosines.mean()), 7),
            }
        )
    )


if __name__ == "__main__":
    main()
