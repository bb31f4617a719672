"""The evaluation question sets stay well-formed: the handbook's and the help centre's checkers
pass on their corpora, and every tuning/held-out split is a partition of the questions it was
cut from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EVAL = Path(__file__).resolve().parents[2] / "eval"


def _ids(*paths: Path) -> list[str]:
    return [q["id"] for p in paths for q in json.loads(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("corpus", ["handbook", "faq"])
def test_checker_passes(corpus: str) -> None:
    run = subprocess.run(
        [sys.executable, str(EVAL / corpus / "check_questions.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "0 problem(s)" in run.stdout


@pytest.mark.parametrize(
    ("hands", "halves"),
    [
        (
            ["handbook/questions-a.json", "handbook/questions-b.json"],
            ["handbook/questions-tune.json", "handbook/questions-heldout.json"],
        ),
        (
            ["manual/questions-b.json"],
            ["manual/questions-b-tune.json", "manual/questions-b-heldout.json"],
        ),
    ],
)
def test_split_is_a_partition(hands: list[str], halves: list[str]) -> None:
    whole = _ids(*(EVAL / h for h in hands))
    tune, heldout = (_ids(EVAL / h) for h in halves)
    assert len(whole) == len(set(whole))
    assert not set(tune) & set(heldout), "a question is in both halves"
    assert sorted(tune + heldout) == sorted(whole), "the halves do not hold the same questions"
