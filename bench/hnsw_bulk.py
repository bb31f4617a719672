"""HNSW index: maintained row by row during a load, or built once after it?

    python bench/hnsw_bulk.py --database-url URL [--sizes 1000,5000,20000] [--dims 384]

For each size N, in a scratch table shaped like kb.embeddings (untyped vector column, model_id,
partial HNSW cosine expression index on (embedding::vector(dims)) WHERE model_id = 1), loads N
random unit vectors (fixed seed) by binary COPY in two ways and prints the wall time of each:

  row by row     the index exists; COPY inserts every vector into the graph as it goes
  build after    COPY into the table without the index, then CREATE INDEX (pgvector's bulk build)

The scratch schema pgkb_bench is dropped at the end; kb is never touched. m and
ef_construction are pgvector's defaults (16, 64); maintenance_work_mem is the server's.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

SETUP = """
DROP SCHEMA IF EXISTS pgkb_bench CASCADE;
CREATE SCHEMA pgkb_bench;
CREATE TABLE pgkb_bench.embeddings (chunk_id bigint, model_id integer, embedding vector);
"""
INDEX = (
    "CREATE INDEX embeddings_hnsw ON pgkb_bench.embeddings USING hnsw "
    "((embedding::vector({dims})) vector_cosine_ops) WHERE model_id = 1"
)


def vectors(n: int, dims: int, seed: int) -> list[Vector]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        raw = [rng.gauss(0, 1) for _ in range(dims)]
        norm = sum(v * v for v in raw) ** 0.5
        out.append(Vector([v / norm for v in raw]))
    return out


def load(conn: psycopg.Connection[Any], rows: list[Vector]) -> None:
    with conn.cursor().copy(
        "COPY pgkb_bench.embeddings (chunk_id, model_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int4", "vector"])
        for i, v in enumerate(rows):
            copy.write_row((i, 1, v))


def run(conn: psycopg.Connection[Any], n: int, dims: int, build_after: bool) -> float:
    rows = vectors(n, dims, seed=n)
    conn.execute(SETUP)
    if not build_after:
        conn.execute(INDEX.format(dims=int(dims)))
    conn.commit()
    started = time.perf_counter()
    load(conn, rows)
    if build_after:
        conn.execute(INDEX.format(dims=int(dims)))
    conn.commit()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--dims", type=int, default=384)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with psycopg.connect(args.database_url) as conn:
        register_vector(conn)
        print(f"{'vectors':>8}  {'row by row s':>12}  {'build after s':>13}  {'ratio':>6}")
        try:
            for n in sizes:
                incremental = run(conn, n, args.dims, build_after=False)
                bulk = run(conn, n, args.dims, build_after=True)
                print(f"{n:>8}  {incremental:>12.2f}  {bulk:>13.2f}  {incremental / bulk:>6.2f}")
        finally:
            conn.rollback()
            conn.execute("DROP SCHEMA IF EXISTS pgkb_bench CASCADE")
            conn.commit()


if __name__ == "__main__":
    main()
