"""The corpora's synthetic vectors derive each vector from its own text's real neighbourhood,
deterministically; ``--prewarm`` reads what searches read into shared buffers."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from bench import corpus, latency

N_REAL, DIMS = 300, 16


@pytest.fixture(scope="module")
def real() -> np.ndarray:
    v = np.random.default_rng(7).normal(size=(N_REAL, DIMS)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_spread_stays_in_its_sources_neighbourhood(real: np.ndarray) -> None:
    size = 1200
    got = corpus.synthetic_vectors(size, real)
    assert np.array_equal(got, corpus.synthetic_vectors(size, real))  # deterministic
    assert not np.array_equal(got, corpus.synthetic_vectors(size + 1, real)[:size])
    assert np.array_equal(got[:N_REAL], real)  # the real vectors first, unchanged
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    base = corpus.vector_sources(size, N_REAL)
    neighbours = corpus.real_neighbours(real)
    assert not (neighbours == np.arange(N_REAL)[:, None]).any()
    # each derived vector is closer to its source or one of the source's neighbours than to
    # the average real vector, and no two derived vectors are the same
    derived = got[N_REAL:]
    near = np.max(
        np.einsum("rd,rkd->rk", derived, real[np.c_[base[N_REAL:], neighbours[base[N_REAL:]]]]),
        axis=1,
    )
    assert (near > np.median(derived @ real.T, axis=1)).all()
    assert len(np.unique(derived, axis=0)) == len(derived)


def test_a_corpus_smaller_than_its_material_is_its_first_vectors(real: np.ndarray) -> None:
    assert np.array_equal(corpus.synthetic_vectors(100, real), real[:100])


def test_prewarm_reads_what_searches_read(db_url: str) -> None:
    """--prewarm loads every block of kb.search_relations() into shared buffers: the kb schema's
    tables and indexes and the chunks' TOAST table, not the postings' heap, which keyword
    searches never read (index-only scans)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        out = latency.prewarm(conn)
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
        again = latency.prewarm(conn)  # the extension exists now: a second run is the same
        assert again["relations"] == out["relations"]
