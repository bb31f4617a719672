"""``ingest``: ingestion throughput, the no-change re-run, and what a one-paragraph edit costs.

The folder (default: the bundled sample corpus, 65 pages of the PostgreSQL manual) is copied to
a temporary folder (so one page can be edited), ingested into a fresh database of the benchmark
server with the configured embedding model (``--hash-embedder``: the local model's tokenizer,
so the same chunks, with vectors from sha256: everything but the model), ingested again
unchanged, then one paragraph of one page is edited and the folder ingested a third time. The
database is dropped at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from bench import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, help="folder of documents (default: the sample)")
    parser.add_argument("--server", metavar="URL", help="admin URL of the benchmark server")
    parser.add_argument("--edit-page", default="indexes-types.html", help="the page edited")
    parser.add_argument("--hash-embedder", action="store_true", help="vectors from sha256")


class HashEmbedder:
    """The local model's tokenizer (the real chunks) with vectors from sha256 (no model)."""

    provider = "bench"
    name = "bench-sha256-embedder"
    dims = 384

    def __init__(self, max_input_tokens: int = 256) -> None:
        from loader.providers.local import LocalEmbedder

        self._tokens = LocalEmbedder(max_input_tokens=max_input_tokens)
        self.max_input_tokens = max_input_tokens
        self.special_tokens = self._tokens.special_tokens

    def count_tokens(self, text: str) -> int:
        return self._tokens.count_tokens(text)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            raw = [(digest[i % 32] - 127.5) / 127.5 + 1e-3 for i in range(self.dims)]
            norm = sum(v * v for v in raw) ** 0.5
            out.append([v / norm for v in raw])
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


def edit_one_paragraph(folder: Path, page: str) -> Path:
    """Put a word in front of the first real paragraph of ``page`` (or of the first page)."""
    path = folder / page
    if not path.exists():
        path = sorted(p for p in folder.rglob("*") if p.suffix in (".html", ".md", ".txt"))[0]
    text = path.read_text(encoding="utf-8")
    match = re.search(r"<p>(.{80,}?)</p>", text, flags=re.S)
    at = match.start(1) if match else 0
    path.write_text(text[:at] + "EDITED: " + text[at:], encoding="utf-8")
    return path


def run(args: Any) -> dict[str, Any]:
    from loader.db.migrations import upgrade
    from loader.ingest.pipeline import ingest_paths
    from loader.resources import sample_corpus_dir

    run = common.Run("ingest", args)
    source = args.corpus or sample_corpus_dir()
    if not Path(source).is_dir():
        raise SystemExit(f"--corpus {source}: not a folder of documents")
    admin = common.bench_server(args.server)
    name = f"pgkb_bench_ingest_{uuid.uuid4().hex[:8]}"
    url = common.create_database(admin, name)
    workdir = Path(tempfile.mkdtemp(prefix="pgkb-bench-ingest-"))
    try:
        folder = workdir / "corpus"
        shutil.copytree(source, folder)
        upgrade(url)
        run.postgres(url)
        config = common.settings(database_url=url, data_dir=str(workdir / "data"))
        embedder = HashEmbedder() if args.hash_embedder else None
        if embedder is not None:
            config = config.replace(
                embedding_provider="openai", embedding_model=embedder.name, embedding_dims=384
            )

        def ingest() -> tuple[Any, float]:
            started = time.perf_counter()
            report = ingest_paths(config, [folder], prune=True, embedder=embedder)
            if report.aborted:
                raise SystemExit(f"ingesting {source} stopped: {report.aborted}")
            return report, time.perf_counter() - started

        first, wall = ingest()
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()
        embed_s = first.seconds.get("embed", 0.0)
        again, again_wall = ingest()
        edited = edit_one_paragraph(folder, args.edit_page)
        edit, edit_wall = ingest()
    finally:
        common.drop_database(admin, name)
        shutil.rmtree(workdir, ignore_errors=True)
    model = embedder.name if embedder else f"{config.embedding_provider}:{config.embedding_model}"
    figures = {
        "corpus": str(source),
        "model": model,
        "files": first.files_seen,
        "failed": len(first.failed),
        "chunks": first.chunks_written,
        "chunks_stored": stored[0] if stored else 0,
        "first": {
            "wall_s": round(wall, 2),
            "chunks_per_s": round(first.chunks_written / wall, 1),
            "embedding_chunks_per_s": round(first.embeddings_computed / embed_s, 1)
            if embed_s
            else None,
            "phases_s": {k: round(v, 2) for k, v in first.seconds.items()},
        },
        "no_change": {
            "wall_s": round(again_wall, 2),
            "unchanged": again.unchanged,
            "parsed": again.new + again.changed + len(again.failed),
            "embedded": again.embeddings_computed,
        },
        "edit": {
            "page": edited.name,
            "wall_s": round(edit_wall, 2),
            "changed": edit.changed,
            "embedded": edit.embeddings_computed,
            "reused": edit.embeddings_reused,
        },
    }
    f = figures
    shown = args.corpus or "the bundled sample corpus"
    run.table(
        f"Ingesting {shown} ({f['files']} files), {model}",
        [
            "chunks",
            "first s",
            "chunks/s",
            "embedding chunks/s",
            "no-change s",
            "edit s",
            "edit: embedded / reused",
        ],
        [
            [
                f["chunks"],
                f["first"]["wall_s"],
                f["first"]["chunks_per_s"],
                f["first"]["embedding_chunks_per_s"] or "-",
                f["no_change"]["wall_s"],
                f["edit"]["wall_s"],
                f"{f['edit']['embedded']} / {f['edit']['reused']}",
            ]
        ],
    )
    return run.finish(figures)
