"""HNSW index: maintained row by row during a load, or dropped and built once after it?

    python bench/hnsw_bulk.py --database-url URL [--sizes 50,100,250,500,1000,2000]
                              [--existing 0] [--dims 384] [--m 16] [--ef-construction 64]

For each size N, in a scratch table shaped like kb.embeddings (untyped vector column, model_id,
partial HNSW cosine expression index on (embedding::vector(dims)) WHERE model_id = 1) that
already holds ``--existing`` E vectors of the model (indexed), loads N random unit vectors (fixed
seed) by binary COPY in the two ways pgkb can, and prints the wall time of each:

  row by row     the index stays; COPY inserts every vector into the graph as it goes
  build after    DROP INDEX, COPY into the table, then CREATE INDEX over all E + N vectors
                 (pgvector's bulk build): what pgkb does above PGKB_HNSW_BULK_THRESHOLD

then the crossover: the smallest size from which building after is faster at that size and
every larger one measured. The scratch schema pgkb_bench is dropped at the end; kb is never
touched. maintenance_work_mem and the parallel maintenance workers are the server's.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg import sql

SETUP = """
DROP SCHEMA IF EXISTS pgkb_bench CASCADE;
CREATE SCHEMA pgkb_bench;
CREATE TABLE pgkb_bench.embeddings (chunk_id bigint, model_id integer, embedding vector);
"""
INDEX = sql.SQL(
    "CREATE INDEX embeddings_hnsw ON pgkb_bench.embeddings USING hnsw "
    "((embedding::vector({dims})) vector_cosine_ops) WITH (m = {m}, ef_construction = {ef}) "
    "WHERE model_id = 1"
)
DROP_INDEX = "DROP INDEX pgkb_bench.embeddings_hnsw"


def vectors(n: int, dims: int, seed: int) -> list[Vector]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        raw = [rng.gauss(0, 1) for _ in range(dims)]
        norm = sum(v * v for v in raw) ** 0.5
        out.append(Vector([v / norm for v in raw]))
    return out


def load(conn: psycopg.Connection[Any], rows: list[Vector], first_id: int = 0) -> None:
    with conn.cursor().copy(
        "COPY pgkb_bench.embeddings (chunk_id, model_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int4", "vector"])
        for i, v in enumerate(rows):
            copy.write_row((first_id + i, 1, v))


def run(
    conn: psycopg.Connection[Any],
    n: int,
    existing: list[Vector],
    args: argparse.Namespace,
    build_after: bool,
) -> float:
    rows = vectors(n, args.dims, seed=n)
    index = INDEX.format(
        dims=sql.Literal(args.dims), m=sql.Literal(args.m), ef=sql.Literal(args.ef_construction)
    )
    conn.execute(SETUP)
    load(conn, existing, first_id=1_000_000)
    conn.execute(index)
    conn.execute("VACUUM ANALYZE pgkb_bench.embeddings")
    started = time.perf_counter()
    if build_after:
        conn.execute(DROP_INDEX)
    load(conn, rows)
    if build_after:
        conn.execute(index)
    return time.perf_counter() - started


def crossover(results: list[tuple[int, float, float]]) -> str:
    """The smallest size from which building after wins at every larger size measured."""
    from_size = None
    for n, incremental, bulk in reversed(results):
        if bulk >= incremental:
            break
        from_size = n
    if from_size is None:
        return "row by row was faster at every size measured up to the largest"
    if from_size == results[0][0]:
        return f"build after was faster at every size measured (from {from_size} vectors)"
    return f"build after is faster from {from_size} vectors on"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--sizes", default="50,100,250,500,1000,2000")
    parser.add_argument("--existing", type=int, default=0, help="vectors already indexed")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=64)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # autocommit: VACUUM runs outside a transaction; every statement commits on its own
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        version = conn.execute("SHOW server_version").fetchone()
        mwm = conn.execute("SHOW maintenance_work_mem").fetchone()
        workers = conn.execute("SHOW max_parallel_maintenance_workers").fetchone()
        print(
            f"PostgreSQL {version[0] if version else '?'}, maintenance_work_mem "
            f"{mwm[0] if mwm else '?'}, max_parallel_maintenance_workers "
            f"{workers[0] if workers else '?'}; {args.dims} dims, m {args.m}, ef_construction "
            f"{args.ef_construction}, {args.existing} vectors already indexed"
        )
        existing = vectors(args.existing, args.dims, seed=-1)
        print(f"{'vectors':>8}  {'row by row s':>12}  {'build after s':>13}  {'ratio':>6}")
        results = []
        try:
            for n in sizes:
                incremental = run(conn, n, existing, args, build_after=False)
                bulk = run(conn, n, existing, args, build_after=True)
                results.append((n, incremental, bulk))
                print(f"{n:>8}  {incremental:>12.2f}  {bulk:>13.2f}  {incremental / bulk:>6.2f}")
            print("crossover: " + crossover(results))
        finally:
            conn.execute("DROP SCHEMA IF EXISTS pgkb_bench CASCADE")


if __name__ == "__main__":
    main()
