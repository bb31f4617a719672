"""The corpora the scenarios measure: real chunks and real vectors, then as many as asked.

The material is a knowledge base with real chunks and vectors of its active model: ``--source
URL`` (only read), or ``--corpus DIR``, a folder pgkb ingests once with the configured model
into a database of the benchmark server (``pgkb_bench_source_<key>``; later runs are no-change
re-runs). ``--corpus`` on the PostgreSQL 15 manual's HTML gives the whole manual, 20,432 chunks.

A corpus of N chunks (database ``pgkb_bench_<N>_<key>``, kept for later runs, rebuilt with
``--rebuild``) is loaded with COPY, as a bulk loader would:

- text: the material's chunks (heading path and content), repeated until N chunks; every
  repetition after the first has about 15% of its words replaced by words of another chunk (same
  vocabulary and word frequencies, different texts);
- vectors: the material's real vectors for its own chunks at first use; every other chunk's
  vector is a random point of the simplex of its text's real vector and 3 of that vector's 20
  real nearest neighbours, plus Gaussian noise (sigma 0.01 per dimension), normalised: the
  chunks derived from one text spread into the region between real vectors, as new texts on the
  same topics would (``spread``; deterministic for a size);
- documents of 20 chunks; category ``c00`` holds 1% of them (the selective filter).

The size ``source`` is the material's knowledge base itself, as pgkb ingested it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench import common

NAMESPACE = uuid.UUID("0b7c6f2e-5a41-4c1e-9f0a-23b5c0d1e7aa")
CHUNKS_PER_DOCUMENT = 20
SPREAD_NEIGHBOURS = 20
SPREAD_SIGMA = 0.01
SPREAD_MIX = 3
BUILDER = 1  # raise when a corpus of the same material and size would come out different
CHUNK_COPY = (
    "COPY kb.chunks (document_id, chunk_index, heading_path, content, content_sha, token_count) "
    "FROM STDIN"
)


@dataclasses.dataclass
class Material:
    texts: list[tuple[str, str]]
    """(heading_path, content) of every chunk with a vector, in chunk id order."""
    vectors: np.ndarray
    model: str
    dims: int
    url: str
    """The knowledge base they were read from."""

    @property
    def key(self) -> str:
        vectors = hashlib.sha256(self.vectors.tobytes()).hexdigest()
        return common.digest(BUILDER, self.model, self.dims, common.digest(self.texts), vectors)


def add_options(parser: Any, sizes: str | None) -> None:
    """The options that say which knowledge base a scenario measures."""
    group = parser.add_argument_group("the knowledge base measured")
    group.add_argument("--corpus", type=Path, help="folder of documents, ingested once as source")
    group.add_argument("--source", metavar="URL", help="knowledge base with real chunks+vectors")
    group.add_argument(
        "--database-url", metavar="URL", help="measure this knowledge base as it is (no build)"
    )
    if sizes is not None:
        group.add_argument(
            "--sizes", default=sizes, help=f"corpus sizes in chunks, or 'source' (default {sizes})"
        )
    group.add_argument("--server", metavar="URL", help="admin URL of the benchmark server")
    group.add_argument("--rebuild", action="store_true", help="build kept corpora again")
    group.add_argument("--maintenance-work-mem", default="512MB", help="for the index builds")


def targets(args: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, URL, build figures) of each knowledge base the options name, built if needed."""
    if args.database_url:
        return [("given", args.database_url, {})]
    if not (args.corpus or args.source):
        raise SystemExit(
            "say what to measure: --corpus DIR (a folder of documents, e.g. the PostgreSQL "
            "manual's HTML), --source URL (a knowledge base with vectors) or --database-url URL"
        )
    sizes = str(getattr(args, "sizes", "source")).split(",")
    for size in sizes:
        if size != "source" and not (size.isdigit() and int(size) > 0):
            raise SystemExit(f"--sizes: {size!r} is not a number of chunks or 'source'")
    admin = common.bench_server(args.server)
    source = args.source or ingest_source(admin, args.corpus)
    material = read_material(source) if sizes != ["source"] else None
    out: list[tuple[str, str, dict[str, Any]]] = []
    for size in sizes:
        if size == "source":
            out.append(("source", source, {}))
        else:
            assert material is not None
            out.append((size, *corpus(admin, int(size), material, args)))
    return out


def ingest_source(admin: str, folder: Path) -> str:
    """The knowledge base of ``folder`` as pgkb ingests it with the configured model, on the
    benchmark server: made on first use, then brought up to date (a no-change re-run)."""
    from loader.ingest.pipeline import ingest_paths

    if not folder.is_dir():
        raise SystemExit(f"--corpus {folder}: not a folder of documents")
    config = common.settings()
    model = (config.embedding_provider, config.embedding_model, config.embedding_dims)
    name = f"pgkb_bench_source_{common.digest(str(folder.resolve()), *model)}"
    if not common.database_exists(admin, name):
        common.create_database(admin, name)
        print(f"ingesting {folder} into {name} once (the model embeds every chunk)", flush=True)
    url = common.with_dbname(admin, name)
    common.upgrade(url)
    report = ingest_paths(config.replace(database_url=url), [folder], prune=True)
    if report.aborted or report.files_seen == 0:
        raise SystemExit(f"ingesting {folder} into {name}: {report.aborted or 'no documents'}")
    if report.failed:
        print(f"{len(report.failed)} file(s) of {folder} could not be ingested", flush=True)
    return url


def read_material(url: str) -> Material:
    with psycopg.connect(url) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        model = conn.execute("SELECT id, name, dims FROM kb.active_model()").fetchone()
        if model is None:
            raise SystemExit(f"{common.redact(url)} has no active model: no vectors to read")
        rows = conn.execute(
            "SELECT c.heading_path, c.content, e.embedding FROM kb.chunks c "
            "JOIN kb.embeddings e ON e.chunk_id = c.id AND e.model_id = %s ORDER BY c.id",
            (model[0],),
        ).fetchall()
    if len(rows) <= SPREAD_NEIGHBOURS:
        raise SystemExit(f"{common.redact(url)} has {len(rows)} chunks with vectors: too few")
    vectors = np.array([r[2].to_numpy() for r in rows], dtype=np.float32)
    return Material([(r[0] or "", r[1]) for r in rows], vectors, model[1], model[2], url)


def corpus(admin: str, size: int, material: Material, args: Any) -> tuple[str, dict[str, Any]]:
    """The URL of the corpus of ``size`` chunks of ``material`` and its build figures, built
    when it is not kept from an earlier run (or with --rebuild), upgraded to this checkout's
    schema when it is."""
    name = f"pgkb_bench_{size}_{material.key}"
    note = common.database_note(admin, name) if common.database_exists(admin, name) else {}
    if note.get("complete") and not args.rebuild:
        url = common.with_dbname(admin, name)
        common.upgrade(url)
        return url, {**note["built"], "kept": True}
    print(f"building {name}: {size} chunks", flush=True)
    common.drop_database(admin, name)
    url = common.create_database(admin, name)
    common.upgrade(url)
    figures = build(url, size, material, args.maintenance_work_mem)
    common.database_note(admin, name, {"complete": True, "built": figures})
    return url, figures


# --- the vectors ----------------------------------------------------------------------------


def vector_sources(size: int, n_real: int) -> np.ndarray:
    """The real vector each chunk derives from: chunk i has the text (and vector) i % n_real."""
    return np.arange(size) % n_real


def real_neighbours(vectors: np.ndarray, k: int = SPREAD_NEIGHBOURS) -> np.ndarray:
    """The k nearest other real vectors of each real vector (cosine; rows are unit vectors)."""
    out = np.empty((len(vectors), k), dtype=np.int64)
    for start in range(0, len(vectors), 2048):
        sims = vectors[start : start + 2048] @ vectors.T
        for r in range(len(sims)):
            sims[r, start + r] = -np.inf  # not itself
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
        out[start : start + 2048] = np.take_along_axis(top, order, axis=1)
    return out


def synthetic_vectors(size: int, vectors: np.ndarray) -> np.ndarray:
    """Every chunk's vector (module docstring: ``spread``), deterministic for a size."""
    n_real, dims = vectors.shape
    base = vector_sources(size, n_real)
    out = np.empty((size, dims), dtype=np.float32)
    first = min(size, n_real)
    out[:first] = vectors[:first]
    rng = np.random.default_rng(size)
    neighbours = real_neighbours(vectors) if size > n_real else None
    for start in range(first, size, 20_000):
        assert neighbours is not None
        b = base[start : start + 20_000]
        picked = np.argsort(rng.random((len(b), neighbours.shape[1])), axis=1)[:, :SPREAD_MIX]
        n = neighbours[b[:, None], picked]  # (rows, mix): distinct neighbours of each source
        w = rng.dirichlet(np.ones(SPREAD_MIX + 1), len(b)).astype(np.float32)
        v = w[:, :1] * vectors[b] + np.einsum("rm,rmd->rd", w[:, 1:], vectors[n])
        v += rng.normal(0, SPREAD_SIGMA, v.shape).astype(np.float32)
        out[start : start + len(b)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def vary(text: str, donor: str, rnd: random.Random) -> str:
    """The text with about 15% of its words replaced by words of the donor text."""
    words = text.split()
    pool = donor.split() or words
    for i in range(len(words)):
        if rnd.random() < 0.15:
            words[i] = rnd.choice(pool)
    return " ".join(words)


# --- the build ------------------------------------------------------------------------------


def build(url: str, size: int, material: Material, maintenance_work_mem: str) -> dict[str, Any]:
    """Load ``size`` chunks into the empty knowledge base at ``url``: documents, chunks (two COPY
    streams with the keyword statistics deferred, then one rebuild), vectors (one binary COPY,
    the HNSW index built after), VACUUM ANALYZE. Build figures: rates, backend CPU, storage."""
    from pgvector.psycopg import register_vector

    texts = material.texts
    n_docs = -(-size // CHUNKS_PER_DOCUMENT)
    doc_ids = [uuid.uuid5(NAMESPACE, f"{size}/{d}") for d in range(n_docs)]
    rnd = random.Random(size)
    rows = []
    for i in range(size):
        heading, content = texts[i % len(texts)]
        if i >= len(texts):
            content = vary(content, texts[rnd.randrange(len(texts))][1], rnd)
        doc = doc_ids[i // CHUNKS_PER_DOCUMENT]
        rows.append((doc, i % CHUNKS_PER_DOCUMENT, heading, content, str(i), len(content.split())))
    chunk_vectors = synthetic_vectors(size, material.vectors)
    figures: dict[str, Any] = {"chunks": size, "documents": n_docs, "material": material.key}
    with psycopg.connect(url) as conn:
        register_vector(conn)
        model_id = one(
            conn, "SELECT kb.register_model(%s, %s, 'bench')", material.model, material.dims
        )
        conn.execute("SELECT kb.drop_model_index(%s)", (model_id,))
        with conn.cursor().copy(
            "COPY kb.documents (id, source_uri, title, content_sha, category) FROM STDIN"
        ) as copy:
            for d, did in enumerate(doc_ids):
                category = "c00" if d % 100 == 0 else f"c0{1 + d % 9}"
                copy.write_row((did, f"bench://{size}/{d}", f"document {d}", str(d), category))
        conn.commit()
    figures.update(load_chunks(url, rows, maintenance_work_mem))
    with psycopg.connect(url) as conn:
        register_vector(conn)
        figures.update(load_vectors(conn, size, model_id, chunk_vectors, maintenance_work_mem))
        conn.autocommit = True
        started = time.perf_counter()
        conn.execute("VACUUM ANALYZE")
        figures["vacuum_analyze_s"] = round(time.perf_counter() - started, 2)
        figures["storage"] = storage(conn, size)
    return figures


def one(conn: psycopg.Connection[Any], statement: str, *params: Any) -> Any:
    row = conn.execute(statement, params).fetchone()
    assert row is not None
    return row[0]


def backend_cpu(conn: psycopg.Connection[Any]) -> float:
    """CPU seconds of the connection's server process (/proc: a server on this machine; NaN
    otherwise): the figure a machine busy with other work does not change."""
    pid = one(conn, "SELECT pg_backend_pid()")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_chunks(url: str, rows: list[tuple[Any, ...]], maintenance_work_mem: str) -> dict[str, Any]:
    """Two connections COPY half the chunks each with the keyword statistics deferred
    (pgkb.defer_keyword_stats), then one kb.rebuild_keyword_stats(): wall and backend CPU."""
    cpu = {"copy": 0.0, "rebuild": 0.0}
    errors: list[BaseException] = []

    def stream(part: list[tuple[Any, ...]]) -> None:
        try:
            with psycopg.connect(url) as conn:
                before = backend_cpu(conn)
                conn.execute("SET LOCAL pgkb.defer_keyword_stats = 'on'")
                with conn.cursor().copy(CHUNK_COPY) as copy:
                    for row in part:
                        copy.write_row(row)
                conn.commit()
                cpu["copy"] += backend_cpu(conn) - before
        except BaseException as exc:  # raised again by the main thread
            errors.append(exc)

    started = time.perf_counter()
    half = -(-len(rows) // 2)
    threads = [threading.Thread(target=stream, args=(rows[k : k + half],)) for k in (0, half)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    copied = time.perf_counter() - started
    with psycopg.connect(url) as conn:
        conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
        )
        before = backend_cpu(conn)
        conn.execute("SELECT kb.rebuild_keyword_stats()")
        conn.commit()
        cpu["rebuild"] = backend_cpu(conn) - before
    elapsed = time.perf_counter() - started
    return {
        "copy_only_s": round(copied, 2),
        "copy_chunks_s": round(elapsed, 2),
        "copy_chunks_per_s": round(len(rows) / elapsed),
        "copy_backend_cpu_s": round(cpu["copy"], 2),
        "rebuild_backend_cpu_s": round(cpu["rebuild"], 2),
        "load_average": common.load_average(),
    }


def load_vectors(
    conn: psycopg.Connection[Any],
    size: int,
    model_id: int,
    chunk_vectors: np.ndarray,
    maintenance_work_mem: str,
) -> dict[str, Any]:
    """COPY the vectors (row i for the chunk at position i: document i // 20, chunk i % 20) with
    the model's HNSW index dropped, then build the index."""
    position = {
        uuid.uuid5(NAMESPACE, f"{size}/{d}"): d * CHUNKS_PER_DOCUMENT
        for d in range(-(-size // CHUNKS_PER_DOCUMENT))
    }
    ids = sorted(
        (position[r[1]] + r[2], r[0])
        for r in conn.execute("SELECT id, document_id, chunk_index FROM kb.chunks")
    )
    assert [i for i, _ in ids] == list(range(size)), "one chunk per row, each once"
    started = time.perf_counter()
    with conn.cursor().copy(
        "COPY kb.embeddings (chunk_id, model_id, embedding) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["bigint", "integer", "vector"])
        for (_, cid), vec in zip(ids, chunk_vectors, strict=True):
            copy.write_row((cid, model_id, vec))
    conn.commit()
    elapsed = time.perf_counter() - started
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
    started = time.perf_counter()
    index = one(conn, "SELECT kb.build_model_index(%s)", model_id)
    conn.commit()
    built = time.perf_counter() - started
    index_bytes = one(conn, "SELECT pg_relation_size(%s::regclass)", f"kb.{index}")
    conn.commit()
    return {
        "copy_embeddings_per_s": round(size / elapsed),
        "hnsw_build_s": round(built, 2),
        "hnsw_mb": round(index_bytes / 2**20, 1),
        "load_average_index": common.load_average(),
    }


def storage(conn: psycopg.Connection[Any], size: int) -> dict[str, Any]:
    """Bytes per chunk of the kb tables (heap, TOAST and indexes) and the database's size."""
    total = one(
        conn,
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
        "WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r'",
    )
    return {
        "total_b_per_chunk": round(int(total) / size),
        "database_mb": round(one(conn, "SELECT pg_database_size(current_database())") / 2**20),
    }
