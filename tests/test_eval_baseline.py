"""The recorded baseline is enforced: the bundled eval's hybrid recall@5 may not drop more than
0.02 below eval/baseline.json (rerun with the real model on the sample corpus)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loader.evaluation.baseline import BASELINE_FILE, TOLERANCE, load_baseline, record


def test_baseline_file_records_figures_with_their_parameters() -> None:
    baseline = load_baseline()
    bundled = baseline["bundled"]
    assert bundled["retrievers"]["hybrid"]["recall@5"] > 0
    assert bundled["parameters"]["embedding_model"]
    assert bundled["command"].startswith("pgkb eval")
    scifact = baseline["beir"]["scifact_train"]
    assert scifact["dataset"] == "scifact_train"
    assert scifact["parameters"]["embedding_model"]
    assert scifact["queries"] > 0
    assert set(scifact["retrievers"]) >= {"vector", "keyword", "hybrid"}


@pytest.mark.model
@pytest.mark.slow
def test_bundled_hybrid_recall_holds_the_baseline(sample_eval: dict[str, Any]) -> None:
    expected = load_baseline()["bundled"]["retrievers"]["hybrid"]["recall@5"]
    measured = sample_eval["retrievers"]["hybrid"]["overall"]["recall@5"]
    assert measured >= expected - TOLERANCE, (
        f"hybrid recall@5 fell to {measured:.3f} from the baseline {expected:.3f} "
        f"(tolerance {TOLERANCE}); see `pgkb eval` for the questions that regressed"
    )


def _report(kind: str, recall: float) -> dict[str, Any]:
    overall = {"recall@5": recall, "mrr@10": 0.5, "ndcg@10": 0.6, "queries": 3}
    report: dict[str, Any] = {
        "kind": kind,
        "k": 5,
        "parameters": {"embedding_model": "m"},
        "retrievers": {"hybrid": {"overall": overall, "by_kind": {}, "latency_ms": {}}},
        "reranked": "not run",
        "documents": 10,
    }
    if kind == "beir":
        report.update(dataset="tiny", path="/d/tiny", qrels="/d/tiny/qrels.tsv", queries=3)
    else:
        report.update(
            questions_file="q.json",
            corpus="/c",
            questions=3,
            abstention={"rule": "x", "unanswerable_flagged": 1.0},
        )
    return report


def test_record_merges_sections(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    record(_report("questions", 0.9), path)
    record(_report("beir", 0.4), path)
    record(_report("questions", 0.95), path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["bundled"]["retrievers"]["hybrid"]["recall@5"] == 0.95
    assert data["beir"]["tiny"]["retrievers"]["hybrid"]["recall@5"] == 0.4
    assert (
        data["beir"]["tiny"]["command"] == "PGKB_EMBEDDING_MODEL=m pgkb eval --beir /d/tiny --json"
    )
    assert data["tolerance"]["hybrid_recall@5"] == TOLERANCE
    assert BASELINE_FILE.name == "baseline.json"
