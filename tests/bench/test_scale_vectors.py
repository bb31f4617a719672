"""The synthetic vectors of bench/scale_bench.py: round two's ``noise`` corpora stay reproducible
and ``spread`` derives each vector from its own source's neighbourhood, deterministically."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scale_bench as sb

N_REAL, N_TEXTS, DIMS = 300, 380, 16


@pytest.fixture(scope="module")
def real() -> np.ndarray:
    v = np.random.default_rng(7).normal(size=(N_REAL, DIMS)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_noise_is_round_two_draw(real: np.ndarray) -> None:
    """The loop round two's build ran, written out: the same vectors bit for bit."""
    size = 1000
    noise = np.random.default_rng(size)
    expected = np.empty((size, DIMS), dtype=np.float32)
    for i in range(size):
        t = i % N_TEXTS
        base = t if t < N_REAL else t % N_REAL
        if i < N_REAL and t < N_REAL:
            expected[i] = real[t]
        else:
            noisy = real[base] + noise.normal(0, sb.SIGMA, DIMS).astype(np.float32)
            expected[i] = noisy / np.linalg.norm(noisy)
    assert np.array_equal(sb.synthetic_vectors(size, N_TEXTS, real, "noise"), expected)


def test_spread_stays_in_its_sources_neighbourhood(real: np.ndarray) -> None:
    size = 1200
    got = sb.synthetic_vectors(size, N_TEXTS, real, "spread")
    assert np.array_equal(got, sb.synthetic_vectors(size, N_TEXTS, real, "spread"))
    assert np.array_equal(got[:N_REAL], real)
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    base = sb.vector_sources(size, N_TEXTS, N_REAL)
    neighbours = sb.real_neighbours(real)
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


def test_unknown_generator_is_named(real: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"'jitter'.*spread, noise, smote"):
        sb.synthetic_vectors(400, N_TEXTS, real, "jitter")
