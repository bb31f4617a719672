"""Ranking metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from loader.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k


def test_recall_counts_relevant_in_top_k() -> None:
    assert recall_at_k(["a", "b", "c"], {"b": 1, "z": 1}, 2) == 0.5
    assert recall_at_k(["a", "b", "c"], {"c": 1}, 2) == 0.0
    assert recall_at_k(["a"], {}, 5) == 0.0


def test_mrr_is_reciprocal_rank_of_first_hit() -> None:
    assert mrr_at_k(["a", "b", "c"], {"c": 1, "b": 1}, 10) == 0.5
    assert mrr_at_k(["a", "b", "c"], {"c": 1}, 2) == 0.0


def test_ndcg_matches_hand_computation() -> None:
    # relevant at ranks 2 and 3 of 2 relevant: DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    expected = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(1.0)


def test_duplicates_count_once() -> None:
    assert ndcg_at_k(["a", "a", "b"], {"b": 1}, 2) == pytest.approx(1 / math.log2(3))
