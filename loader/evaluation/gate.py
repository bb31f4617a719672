"""The eval gate: one run of a question set compared with its recorded baseline, question by
question, so that a loss is named and a gain elsewhere never cancels it.

A *set* (``bundled``, ``bundled-holdout``, ``manual-tune``, ``scifact_train``, ...) is recorded
as a :func:`snapshot` of an eval report: parameters and model, the aggregate figures per
retriever, the abstention rates, and per question the rank of each relevant document in every
retriever's top :data:`~loader.evaluation.runner.DEPTH` and the abstention verdict.
:func:`compare` checks a run's snapshot against the recorded one; every problem is a
:class:`Finding`. The rules, per retriever recorded (vector, keyword, hybrid, and reranked once
it exists):

- **top k**: a relevant document that was in the top k (k = 5) and is no longer fails, naming
  the question, the document and both ranks.
- **aggregates, losses only**: for recall@k, MRR@10 and nDCG@10 the gate adds up what each
  question *lost* (recorded minus measured, where positive; gains are not counted) and fails
  when the sum exceeds :data:`TOLERANCE_QUESTIONS` question(s): one question's worth for
  recall (1/n of the mean over n answerable questions; any recall loss also fails the top-k
  rule), half a question's worth for MRR@10 and nDCG@10 (0.5/n: one question's first relevant
  page slipping from rank 1 to rank 2 costs MRR exactly that and passes; 1 -> 3 or two such
  slips fail). Per-kind figures are sums over fewer questions, so the overall rule bounds them.
- **abstention**: an unanswerable question no longer flagged, or an answerable one newly
  flagged, fails (so do worse rates, for sets recorded without per-question verdicts).
- **parameters**: any retrieval setting, the model, k or the abstention rule differing from the
  recorded ones fails until the baseline is re-recorded.
- **the set itself**: questions added, removed or with other sources, and retrievers added or
  missing, fail until re-recorded.

Findings carry ``lowers``: whether they are a drop in quality. Recording refuses those without
an explicit reason (:mod:`loader.evaluation.baseline`); parameter and set changes are what
re-recording is for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from loader.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k
from loader.evaluation.runner import DEPTH

TOLERANCE_QUESTIONS = {"recall": 1.0, "mrr": 0.5, "ndcg": 0.5}
"""Largest summed per-question loss allowed, in questions' worth, per metric family."""
EPS = 1e-9
SHOW = 15
"""Questions named per finding (the rest are counted)."""


@dataclasses.dataclass(frozen=True)
class Finding:
    set: str
    message: str
    fails: bool = True
    """The gate fails on it (notes do not)."""
    lowers: bool = False
    """A drop in quality: recording it needs ``--accept-lower``."""
    questions: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.set}: {self.message}"


# --- snapshots --------------------------------------------------------------------------------


def metric_family(name: str) -> str:
    return name.split("@", 1)[0]


def snapshot(part: Mapping[str, Any], *, k: int, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """What the baseline keeps of one set of an eval report (the main questions, the held-out
    ones, or a BEIR dataset): figures, abstention, per-question ranks and verdicts."""
    retrievers = {
        mode: {
            **entry["overall"],
            **({"by_kind": entry["by_kind"]} if entry.get("by_kind") else {}),
        }
        for mode, entry in part["retrievers"].items()
    }
    abstention = dict(part.get("abstention") or {})
    rows = part.get("per_question") or part.get("per_query") or []
    modes = list(part["retrievers"])
    per_question: dict[str, Any] = {}
    for row in rows:
        entry: dict[str, Any] = {"kind": row["kind"]}
        for mode in modes:
            ranks = (row.get(mode) or {}).get("ranks")
            if ranks is not None:
                entry[mode] = ranks
        if row.get("grades"):
            entry["grades"] = row["grades"]
        if "abstain" in row:
            entry["abstain"] = row["abstain"]
        per_question[row["id"]] = entry
    gated = {**parameters, "k": k}
    if abstention.get("rule") is not None:
        gated["abstention_rule"] = abstention["rule"]
    return {
        "k": k,
        "model": parameters.get("embedding_model"),
        "parameters": gated,
        "retrievers": retrievers,
        "abstention": abstention,
        "per_question": per_question,
    }


def question_scores(
    ranks: Mapping[str, int | None], grades: Mapping[str, int] | None, k: int
) -> dict[str, float]:
    """recall@k, MRR@10 and nDCG@10 of one question from its relevant documents' ranks."""
    ranking = [f"\x00{i}" for i in range(DEPTH)]
    for doc, rank in ranks.items():
        if rank is not None and 1 <= rank <= DEPTH:
            ranking[rank - 1] = doc
    relevant = dict(grades) if grades else {doc: 1 for doc in ranks}
    return {
        f"recall@{k}": recall_at_k(ranking, relevant, k),
        f"mrr@{DEPTH}": mrr_at_k(ranking, relevant, DEPTH),
        f"ndcg@{DEPTH}": ndcg_at_k(ranking, relevant, DEPTH),
    }


# --- comparison -------------------------------------------------------------------------------


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOW])
    return shown + (f", ... ({len(items) - SHOW} more)" if len(items) > SHOW else "")


def _rank(rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else f"not in the top {DEPTH}"


_MISSING = object()


def _parameter_findings(name: str, recorded: Mapping[str, Any], run: Mapping[str, Any]) -> Any:
    before, after = recorded.get("parameters") or {}, run.get("parameters") or {}
    diffs = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old != new:
            shown_old = "(not recorded)" if old is _MISSING else repr(old)
            shown_new = "(not set)" if new is _MISSING else repr(new)
            diffs.append(f"{key} {shown_old} -> {shown_new}")
    if diffs:
        yield Finding(
            name,
            "the run's parameters differ from the recorded ones: "
            + "; ".join(diffs)
            + " (if the change is meant, re-record the baseline with it)",
        )


def compare(name: str, recorded: Mapping[str, Any], run: Mapping[str, Any]) -> list[Finding]:
    """Every way ``run`` (a :func:`snapshot`) falls short of or departs from ``recorded``."""
    findings: list[Finding] = list(_parameter_findings(name, recorded, run))
    k = int(recorded.get("k", run.get("k", 5)))
    before_modes, after_modes = list(recorded.get("retrievers", {})), list(run["retrievers"])
    for mode in before_modes:
        if mode not in after_modes:
            findings.append(
                Finding(name, f"retriever {mode} was recorded but did not run", lowers=True)
            )
    for mode in after_modes:
        if mode not in before_modes:
            findings.append(
                Finding(name, f"retriever {mode} ran but has no recorded figures (re-record)")
            )
    modes = [m for m in before_modes if m in after_modes]

    old_q: Mapping[str, Any] | None = recorded.get("per_question") or None
    new_q: Mapping[str, Any] = run.get("per_question") or {}
    if old_q is None:
        findings.append(
            Finding(
                name,
                "recorded without per-question ranks: only aggregate figures and rates are "
                "checked (re-record to gate every question)",
                fails=False,
            )
        )
        findings += _aggregate_findings(name, recorded, run, modes)
        findings += _rate_findings(name, recorded, run)
        return findings

    removed = [q for q in old_q if q not in new_q]
    added = [q for q in new_q if q not in old_q]
    changed = [
        q
        for q in old_q
        if q in new_q
        and (
            old_q[q].get("kind") != new_q[q].get("kind")
            or any(
                set(old_q[q].get(m) or {}) != set(new_q[q].get(m) or {})
                for m in modes
                if m in old_q[q] or m in new_q[q]
            )
        )
    ]
    for label, ids in (
        ("removed", removed),
        ("added", added),
        ("changed (kind or sources)", changed),
    ):
        if ids:
            findings.append(
                Finding(
                    name,
                    f"questions {label} since the baseline was recorded: {_names(ids)} "
                    "(re-record the baseline with the new question set)",
                    questions=tuple(ids),
                )
            )
    shared = [q for q in old_q if q in new_q and q not in changed]

    for mode in modes:
        left: list[str] = []
        left_ids: list[str] = []
        for qid in shared:
            before, after = old_q[qid].get(mode), new_q[qid].get(mode)
            if not before:
                continue
            for doc, rank in before.items():
                new_rank = (after or {}).get(doc)
                if rank is not None and rank <= k and (new_rank is None or new_rank > k):
                    left.append(f"{qid} ({doc} {_rank(rank)} -> {_rank(new_rank)})")
                    if qid not in left_ids:
                        left_ids.append(qid)
        if left:
            findings.append(
                Finding(
                    name,
                    f"{mode}: {len(left_ids)} question(s) lost a relevant document from the "
                    f"top {k}: {_names(left)}",
                    lowers=True,
                    questions=tuple(left_ids),
                )
            )
        findings += _loss_findings(name, mode, old_q, new_q, shared, k)

    findings += _abstention_findings(name, old_q, new_q, shared)
    return findings


def _loss_findings(
    name: str,
    mode: str,
    old_q: Mapping[str, Any],
    new_q: Mapping[str, Any],
    shared: Sequence[str],
    k: int,
) -> list[Finding]:
    answerable = [q for q in shared if old_q[q].get(mode)]
    n = len(answerable)
    if not n:
        return []
    before = {q: question_scores(old_q[q][mode], old_q[q].get("grades"), k) for q in answerable}
    after = {
        q: question_scores(new_q[q].get(mode) or {}, new_q[q].get("grades"), k) for q in answerable
    }
    findings = []
    for metric in before[answerable[0]]:
        losses = sorted(
            (
                (before[q][metric] - after[q][metric], q)
                for q in answerable
                if before[q][metric] - after[q][metric] > EPS
            ),
            key=lambda item: (-item[0], item[1]),
        )
        lost = sum(loss for loss, _ in losses)
        allowed = TOLERANCE_QUESTIONS[metric_family(metric)]
        if lost > allowed + EPS:
            net = sum(after[q][metric] - before[q][metric] for q in answerable) / n
            findings.append(
                Finding(
                    name,
                    f"{mode} {metric}: the questions that lost cost {lost / n:.4f} of the mean "
                    f"({lost:.2f} questions' worth; tolerance {allowed:g} question = "
                    f"{allowed / n:.4f} of {n}; net change {net:+.4f}, gains do not count): "
                    + _names([f"{q} -{loss:.3f}" for loss, q in losses]),
                    lowers=True,
                    questions=tuple(q for _, q in losses),
                )
            )
    return findings


def _abstention_findings(
    name: str, old_q: Mapping[str, Any], new_q: Mapping[str, Any], shared: Sequence[str]
) -> list[Finding]:
    missed, flagged = [], []
    for qid in shared:
        before, after = old_q[qid].get("abstain"), new_q[qid].get("abstain")
        if before is None or after is None:
            continue
        unanswerable = old_q[qid].get("kind") == "unanswerable"
        if unanswerable and before and not after:
            missed.append(qid)
        if not unanswerable and not before and after:
            flagged.append(qid)
    findings = []
    if missed:
        findings.append(
            Finding(
                name,
                f"abstention: unanswerable question(s) no longer flagged: {_names(missed)}",
                lowers=True,
                questions=tuple(missed),
            )
        )
    if flagged:
        findings.append(
            Finding(
                name,
                f"abstention: answerable question(s) newly flagged as unanswerable: "
                f"{_names(flagged)}",
                lowers=True,
                questions=tuple(flagged),
            )
        )
    return findings


def _aggregate_findings(
    name: str, recorded: Mapping[str, Any], run: Mapping[str, Any], modes: Sequence[str]
) -> list[Finding]:
    """Mean figures only (a set recorded without per-question ranks)."""
    findings = []
    for mode in modes:
        before, after = recorded["retrievers"][mode], run["retrievers"][mode]
        n = int(after.get("queries") or before.get("queries") or 0)
        if not n:
            continue
        for metric, old in before.items():
            if not isinstance(old, int | float) or metric == "queries" or "@" not in metric:
                continue
            new = after.get(metric)
            if new is None:
                continue
            allowed = TOLERANCE_QUESTIONS[metric_family(metric)] / n
            if old - new > allowed + EPS:
                findings.append(
                    Finding(
                        name,
                        f"{mode} {metric} fell from {old:.4f} to {new:.4f} (tolerance "
                        f"{allowed:.4f}, {TOLERANCE_QUESTIONS[metric_family(metric)]:g} "
                        f"question of {n})",
                        lowers=True,
                    )
                )
    return findings


def _rate_findings(name: str, recorded: Mapping[str, Any], run: Mapping[str, Any]) -> list[Finding]:
    before, after = recorded.get("abstention") or {}, run.get("abstention") or {}
    findings = []
    caught_old, caught_new = before.get("unanswerable_flagged"), after.get("unanswerable_flagged")
    if caught_old is not None and caught_new is not None and caught_new < caught_old - EPS:
        findings.append(
            Finding(
                name,
                f"abstention: unanswerable flagged fell from {caught_old:.4f} to {caught_new:.4f}",
                lowers=True,
            )
        )
    false_old, false_new = before.get("answerable_flagged"), after.get("answerable_flagged")
    if false_old is not None and false_new is not None and false_new > false_old + EPS:
        findings.append(
            Finding(
                name,
                f"abstention: answerable wrongly flagged rose from {false_old:.4f} to "
                f"{false_new:.4f}",
                lowers=True,
            )
        )
    return findings


def summary_line(name: str, recorded: Mapping[str, Any] | None, run: Mapping[str, Any]) -> str:
    """``name: hybrid recall@5 0.910 (recorded 0.910), ...`` for the gate's verdict."""
    hybrid: Mapping[str, Any] = run["retrievers"].get("hybrid") or next(
        iter(run["retrievers"].values()), {}
    )
    old = ((recorded or {}).get("retrievers") or {}).get("hybrid") or {}
    parts = []
    for metric in (f"recall@{run.get('k', 5)}", f"mrr@{DEPTH}", f"ndcg@{DEPTH}"):
        if metric in hybrid:
            was = f" (recorded {old[metric]:.3f})" if metric in old else ""
            parts.append(f"{metric} {hybrid[metric]:.3f}{was}")
    return f"{name}: hybrid " + ", ".join(parts)
