"""Where the COPY path's time goes: wall time and the server backend's own CPU time (from
/proc, so the figure holds on a machine shared with other work) of each step of loading a
corpus's chunks and of kb.rebuild_keyword_stats(), on a scratch copy of a kept corpus.

    python bench/keyword_stats_cost.py SOURCE_URL ADMIN_URL

SOURCE_URL: a corpus built by `bench/scale_bench.py --keep` (e.g. pgkb_scale_100000), only
read; ADMIN_URL: a database on the same server (the server must run on this machine: the
backend's CPU time is read from /proc/<pid>/stat). A scratch database pgkb_statcost is created,
upgraded to this checkout's schema and dropped at the end.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = "document_id, chunk_index, heading_path, content, content_sha, token_count"


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from loader.db.migrations import upgrade
    from tests.helpers import create_database, drop_database

    source, admin = sys.argv[1], sys.argv[2]
    with psycopg.connect(source) as src:
        documents = src.execute(
            "SELECT id, source_uri, title, content_sha, category FROM kb.documents"
        ).fetchall()
        chunks = src.execute(f"SELECT {COLUMNS} FROM kb.chunks ORDER BY id").fetchall()
    drop_database(admin, "pgkb_statcost")
    url = create_database(admin, "pgkb_statcost")
    upgrade(url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            conn.execute("SET client_min_messages = warning")
            conn.execute("SET maintenance_work_mem = '512MB'")
            with conn.cursor().copy(
                "COPY kb.documents (id, source_uri, title, content_sha, category) FROM STDIN"
            ) as copy:
                for row in documents:
                    copy.write_row(row)

            def step(name: str, sql: str | None = None) -> None:
                cpu, started = backend_cpu(pid), time.perf_counter()
                if sql is None:
                    with conn.cursor().copy(f"COPY kb.chunks ({COLUMNS}) FROM STDIN") as copy:
                        for row in chunks:
                            copy.write_row(row)
                else:
                    conn.execute(sql)
                print(
                    f"| {name} | {time.perf_counter() - started:.2f} | "
                    f"{backend_cpu(pid) - cpu:.2f} | {load()} |",
                    flush=True,
                )

            def reset() -> None:
                conn.execute("TRUNCATE kb.chunks CASCADE")
                conn.execute("SELECT kb.rebuild_keyword_stats()")
                conn.execute("CHECKPOINT")

            print(f"{len(chunks)} chunks\n")
            print("| step | wall s | backend CPU s | load average |\n|---|---|---|---|")
            reset()
            step("COPY, one statement (the trigger's bulk path)")
            reset()
            conn.execute("BEGIN")
            conn.execute("SET LOCAL pgkb.defer_keyword_stats = 'on'")
            step("COPY, statistics trigger deferred (transition table still captured)")
            conn.execute("COMMIT")
            reset()
            conn.execute("ALTER TABLE kb.chunks DISABLE TRIGGER chunks_stats_insert")
            step("COPY, statistics trigger off")
            conn.execute("ALTER TABLE kb.chunks ENABLE TRIGGER chunks_stats_insert")
            step(
                "kb.rebuild_keyword_stats() (parallel index build allowed)",
                "SELECT kb.rebuild_keyword_stats()",
            )
            conn.execute("SET max_parallel_maintenance_workers = 0")
            step(
                "kb.rebuild_keyword_stats() (one process)",
                "SELECT kb.rebuild_keyword_stats()",
            )
            # the steps of kb.rebuild_keyword_stats(), one process each (parallel workers' CPU
            # time is not the backend's)
            conn.execute("SET max_parallel_workers_per_gather = 0")
            conn.execute("BEGIN")
            step("  TRUNCATE term_stats, term_postings", "TRUNCATE kb.term_stats, kb.term_postings")
            step(
                "  term_stats from ts_stat()",
                "INSERT INTO kb.term_stats (lexeme, df) SELECT s.word, s.ndoc "
                "FROM ts_stat('SELECT tsv FROM kb.chunks') AS s ORDER BY s.word",
            )
            step(
                "  corpus_stats",
                "UPDATE kb.corpus_stats SET chunk_count = s.n, total_lexemes = s.len FROM "
                "(SELECT count(*) AS n, coalesce(sum(length(c.tsv)), 0) AS len FROM kb.chunks c) s",
            )
            # the postings query of kb.rebuild_keyword_stats (kb.term_impacts' expression inlined)
            postings = (
                "SELECT t.lexeme, (f.tf * 1.9 / (f.tf + c.k))::real AS impact, c.id "
                "FROM (SELECT c.id, c.tsv, "
                "(0.9 * (0.25 + 0.75 * length(c.tsv) / 80.0))::float8 AS k "
                "FROM kb.chunks c OFFSET 0) c, unnest(c.tsv) AS t, "
                "LATERAL (SELECT coalesce(array_length(t.positions, 1), 1)::float8 AS tf) f "
                "WHERE t.lexeme IN (SELECT s.lexeme FROM kb.term_stats s WHERE s.df > 1000)"
            )
            step(
                "  postings computed through kb.term_impacts(), not stored",
                "SELECT sum(i.impact), count(*) FROM kb.chunks c, kb.term_impacts(c.tsv) AS i "
                "WHERE i.lexeme IN (SELECT t.lexeme FROM kb.term_stats t WHERE t.df > 1000)",
            )
            step(
                "  postings computed, not stored",
                f"SELECT sum(p.impact), count(*) FROM ({postings}) p",
            )
            step(
                "  drop the postings primary key",
                "ALTER TABLE kb.term_postings DROP CONSTRAINT term_postings_pkey",
            )
            step(
                "  postings inserted",
                f"INSERT INTO kb.term_postings (lexeme, impact, chunk_id) {postings}",
            )
            step(
                "  primary key built (one process)",
                "ALTER TABLE kb.term_postings ADD CONSTRAINT term_postings_pkey "
                "PRIMARY KEY (lexeme, impact, chunk_id)",
            )
            conn.execute("ALTER TABLE kb.term_postings DROP CONSTRAINT term_postings_pkey")
            conn.execute("RESET max_parallel_maintenance_workers")
            step(
                "  primary key built (parallel build allowed)",
                "ALTER TABLE kb.term_postings ADD CONSTRAINT term_postings_pkey "
                "PRIMARY KEY (lexeme, impact, chunk_id)",
            )
            conn.execute("ROLLBACK")
            n = conn.execute("SELECT count(*) FROM kb.term_postings").fetchone()
            print(f"\nkb.term_postings rows: {n[0] if n else 0}")
    finally:
        drop_database(admin, "pgkb_statcost")


if __name__ == "__main__":
    main()
