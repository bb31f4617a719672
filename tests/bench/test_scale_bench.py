"""bench/scale_bench.py's measuring conditions: --prewarm reads what searches read into shared
buffers, and each run records the server's memory settings."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scale_bench as sb


def test_prewarm_reads_what_searches_read(db_url: str) -> None:
    """--prewarm loads every block of kb.search_relations() into shared buffers: the kb schema's
    tables and indexes and the chunks' TOAST table, not the postings' heap, which keyword
    searches never read (index-only scans); the run records the memory settings it was
    measured with."""
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        memory = sb.server_memory(conn)
        assert set(memory) == {"shared_buffers", "effective_cache_size", "work_mem", "huge_pages"}
        assert memory["shared_buffers"].endswith(("kB", "MB", "GB"))
        out = sb.prewarm(conn)
        rows = conn.execute(
            "SELECT relation::text, bytes / current_setting('block_size')::int"
            " FROM kb.search_relations()"
        ).fetchall()
        names = {name for name, _ in rows}
        assert "kb.chunks" in names and "kb.chunks_tsv_idx" in names
        assert "kb.term_postings_pkey" in names and "kb.term_postings" not in names
        assert any(name.startswith("pg_toast.") for name in names)
        assert out["relations"] == len(rows)
        assert out["blocks"] == sum(blocks for _, blocks in rows)
        again = sb.prewarm(conn)  # the extension exists now: a second run is the same
        assert again["relations"] == out["relations"]
