"""The corpus's own similarity scale: what a query the corpus answers scores, per embedding model.

A cosine similarity means different things in different corpora and models (MiniLM on a staff
handbook, a 1536-dimension API model on papers), so a fixed threshold on it does not travel. The
profile measures the scale once: :func:`measure_profile` embeds random in-corpus pseudo-queries
(``kb.pseudo_queries``: 10 consecutive words of up to 200 chunks), takes each one's best vector
similarity, and stores the quantiles in ``kb.settings`` under ``similarity_profile``, with the
model and the corpus size it was measured on. The gate's ``relative_similarity`` signal is then
``(top_similarity - median) / (median - 10th percentile)``: 0 at the median pseudo-query, -1 at
its 10th percentile, whatever the model.

The profile is measured after every ingestion that changed documents and by ``pgkb eval``
when it is missing or stale (another model, or the corpus grew or shrank by more than a
quarter); without one the signal is None and no clause on it fires.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from loader.db import queries

SETTINGS_KEY = "similarity_profile"
SAMPLE_SIZE = 200
MIN_SAMPLE = 20
"""Fewer pseudo-queries than this (a tiny corpus) give no profile: the quantiles would be noise."""
STALE_RATIO = 0.25

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]


def load_profile(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """The stored profile of the active model, or None."""
    row = conn.execute(queries.SIMILARITY_PROFILE).fetchone()
    return dict(row[0]) if row is not None and isinstance(row[0], dict) else None


def is_stale(conn: psycopg.Connection[Any], profile: Mapping[str, Any] | None) -> bool:
    """Missing, measured for another model, or on a corpus whose size changed by > 25%."""
    if not profile:
        return True
    row = conn.execute(queries.PROFILE_STATE).fetchone()
    if row is None or row[0] != profile.get("model"):
        return True
    chunks, measured = int(row[1] or 0), int(profile.get("chunks") or 0)
    return abs(chunks - measured) > STALE_RATIO * max(measured, 1)


def measure_profile(
    conn: psycopg.Connection[Any], embed: Embed, sample_size: int = SAMPLE_SIZE
) -> dict[str, Any] | None:
    """Measure the active model's profile on this corpus and store it (the caller commits).

    Returns None, storing nothing, when there is no active model or too few chunks to sample.
    """
    from pgvector import Vector

    state = conn.execute(queries.PROFILE_STATE).fetchone()
    if state is None or state[0] is None:
        return None
    rows = conn.execute(queries.PSEUDO_QUERIES, (sample_size,)).fetchall()
    if len(rows) < MIN_SAMPLE:
        return None
    vectors = embed([str(r[1]) for r in rows])
    best: list[float] = []
    for vector in vectors:
        hit = conn.execute(queries.BEST_SIMILARITY, (Vector(list(vector)),)).fetchone()
        if hit is not None and hit[0] is not None:
            best.append(float(hit[0]))
    if len(best) < MIN_SAMPLE:
        return None
    cuts = statistics.quantiles(best, n=20, method="inclusive")
    profile = {
        "model": state[0],
        "chunks": int(state[1] or 0),
        "sample": len(best),
        "q10": round(cuts[1], 6),
        "q25": round(statistics.quantiles(best, n=4, method="inclusive")[0], 6),
        "q50": round(statistics.median(best), 6),
        "q90": round(cuts[17], 6),
    }
    conn.execute(queries.SAVE_SETTING, (SETTINGS_KEY, Jsonb(profile)))
    return profile


def ensure_profile(conn: psycopg.Connection[Any], embed: Embed) -> dict[str, Any] | None:
    """The stored profile, measured first when missing or stale (commits what it stores)."""
    profile = load_profile(conn)
    if is_stale(conn, profile):
        profile = measure_profile(conn, embed)
        conn.commit()
    return profile


def relative_similarity(top: float | None, profile: Mapping[str, Any] | None) -> float | None:
    """``(top - median) / (median - 10th percentile)`` of the profile; None without either."""
    if top is None or not profile:
        return None
    median, low = float(profile["q50"]), float(profile["q10"])
    spread = median - low
    if spread <= 0:
        return None
    return (top - median) / spread
