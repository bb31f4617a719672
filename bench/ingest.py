"""``ingest``: ingestion throughput, the no-change re-run, and what a one-paragraph edit costs.

The folder (default: the bundled sample corpus, 65 pages of the PostgreSQL manual) is copied to
a temporary folder (so one page can be edited), ingested into a fresh database of the benchmark
server with the configured embedding model (``--hash-embedder``: the local model's tokenizer,
so the same chunks, with vectors from sha256: everything but the model), ingested again
unchanged, then one paragraph of one page is edited and the folder ingested a third time.

Then ``pgkb ingest DIR --watch --prune`` runs on the folder as its own process, as a user starts
it, with the configured model (skipped with ``--hash-embedder``, ``--watch-rounds 0``): each round
writes a new file, saves an existing one atomically (a temporary file renamed over it) and
deletes the previous round's file, each timed from the write until the database shows it (the
new text's chunk with its embedding, or the document gone), polled every 20 ms. The database is
dropped at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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
    parser.add_argument(
        "--watch-rounds", type=int, default=5, help="rounds of changes under --watch (0: none)"
    )


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


def shown(conn: psycopg.Connection[Any], uri: str, text: str | None) -> bool:
    """``text`` in the document's embedded chunks; None: the document is gone."""
    if text is None:
        found = conn.execute("SELECT 1 FROM kb.documents WHERE source_uri = %s", [uri])
        return found.fetchone() is None
    found = conn.execute(
        "SELECT 1 FROM kb.documents d JOIN kb.chunks c ON c.document_id = d.id "
        "JOIN kb.embeddings e ON e.chunk_id = c.id "
        "WHERE d.source_uri = %s AND strpos(c.content, %s) > 0",
        [uri, text],
    )
    return found.fetchone() is not None


def watch(url: str, folder: Path, data_dir: Path, rounds: int) -> dict[str, Any]:
    """Seconds from each write to searchable under ``pgkb ingest --watch``, by kind of change,
    and the median seconds of each stage of the watcher's batches that ingested a file."""
    env = {**os.environ, "PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(data_dir)}
    env["PYTHONPATH"] = os.pathsep.join([str(common.ROOT), env.get("PYTHONPATH", "")])
    (folder / "watch-policy.md").write_text("# Policy\n\nVersion 0 of the policy.\n")
    process = subprocess.Popen(
        [sys.executable, "-c", "from loader.cli import main; main()", "ingest", str(folder),
         "--watch", "--prune", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    first = threading.Event()
    batches: list[dict[str, float]] = []

    def read() -> None:
        for line in process.stdout or ():
            data = json.loads(line) if line.strip() else {}
            if data.get("event") == "initial":
                first.set()
            elif data.get("event") == "batch" and data.get("new", 0) + data.get("changed", 0):
                batches.append(data["seconds"])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    times: dict[str, list[float]] = {"new file": [], "atomic save": [], "deletion": []}
    try:
        if not first.wait(600):
            raise SystemExit("the watcher's first run did not finish within 600 s")
        with psycopg.connect(url, autocommit=True) as conn:

            def until(kind: str, name: str, text: str | None) -> None:
                uri, started = str((folder / name).resolve()), time.perf_counter()
                while not shown(conn, uri, text):
                    if time.perf_counter() - started > 120 or process.poll() is not None:
                        raise SystemExit(f"--watch: {kind} of {name} not searchable in 120 s")
                    time.sleep(0.02)
                times[kind].append(round(time.perf_counter() - started, 3))
                time.sleep(0.5)  # the batch has settled before the next change

            for i in range(rounds):
                (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nThe note number {i} is new.\n")
                until("new file", f"note-{i}.md", f"number {i}")
                temporary = folder / ".watch-policy.md.tmp"
                temporary.write_text(f"# Policy\n\nVersion {i + 1} of the policy.\n")
                os.replace(temporary, folder / "watch-policy.md")
                until("atomic save", "watch-policy.md", f"Version {i + 1} ")
                if i:
                    (folder / f"note-{i - 1}.md").unlink()
                    until("deletion", f"note-{i - 1}.md", None)
    finally:
        process.terminate()
        process.wait(60)
        reader.join(10)  # the output's end has been read: the pipe can be closed
        if process.stdout is not None:
            process.stdout.close()
    stages = sorted({k for b in batches for k in b}, key=lambda k: k == "total")
    return {
        "changes_s": {k: common.spread(v) for k, v in times.items() if v},
        "batch_stages_median_s": {
            k: round(statistics.median(b.get(k, 0.0) for b in batches), 3) for k in stages
        },
    }


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
        rounds = 0 if embedder is not None else args.watch_rounds
        watched = watch(url, folder, workdir / "data", rounds) if rounds > 0 else None
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
        "watch": watched,
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
    if watched:
        run.table(
            f"From a write to searchable under `pgkb ingest --watch` ({rounds} rounds), {model}",
            ["change", "rounds", "min s", "median s", "max s"],
            [[k, v["n"], v["min"], v["median"], v["max"]] for k, v in watched["changes_s"].items()],
        )
    return run.finish(figures)
