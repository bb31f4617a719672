"""The readable form of an eval report (``pgkb eval`` without ``--json``)."""

from __future__ import annotations

from typing import Any

from loader.evaluation.runner import DEPTH, MODES


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _retriever_table(retrievers: dict[str, Any], k: int, reranked: str | None) -> list[str]:
    names = (f"recall@{k}", f"mrr@{DEPTH}", f"ndcg@{DEPTH}")
    lines = [
        f"{'retriever':<10} {names[0]:>9} {names[1]:>8} {names[2]:>8} {'p50 ms':>8} {'p95 ms':>8}"
    ]
    for mode in [*MODES, *(m for m in retrievers if m not in MODES)]:
        entry = retrievers.get(mode)
        if entry is None:
            continue
        overall, latency = entry["overall"], entry["latency_ms"]
        lines.append(
            f"{mode:<10} {overall[names[0]]:>9.3f} {overall[names[1]]:>8.3f} "
            f"{overall[names[2]]:>8.3f} {latency['p50']:>8.1f} {latency['p95']:>8.1f}"
        )
    if reranked:
        lines.append(f"{'reranked':<10} {reranked}")
    return lines


def _kind_table(retrievers: dict[str, Any], k: int) -> list[str]:
    kinds: list[str] = []
    for entry in retrievers.values():
        for kind in entry.get("by_kind", {}):
            if kind not in kinds:
                kinds.append(kind)
    if not kinds:
        return []
    recall, ndcg = f"recall@{k}", f"ndcg@{DEPTH}"
    header = f"{'kind':<12} {'n':>3} " + " ".join(f"{m + ' ' + recall:>17}" for m in MODES)
    lines = [header]
    for kind in kinds:
        row = [f"{kind:<12}"]
        n = next(
            (e["by_kind"][kind]["queries"] for e in retrievers.values() if kind in e["by_kind"]),
            0,
        )
        row.append(f"{n:>3}")
        for mode in MODES:
            cell = retrievers.get(mode, {}).get("by_kind", {}).get(kind)
            row.append(f"{cell[recall]:>17.3f}" if cell else f"{'-':>17}")
        lines.append(" ".join(row))
    lines.append(f"(per kind {ndcg}: see --json)")
    return lines


def _ids(ids: list[str], limit: int = 12) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more, see --json)" if len(ids) > limit else "")


def _abstention_lines(ab: dict[str, Any]) -> list[str]:
    lines = [f"abstention rule ({ab['rule_source']}): {ab['rule']}"]
    if ab["unanswerable"]:
        caught = ab["unanswerable"] - len(ab["missed_unanswerable"])
        lines.append(
            f"  unanswerable flagged:       {caught}/{ab['unanswerable']} "
            f"({_pct(ab['unanswerable_flagged'])})"
            + (f"; missed: {_ids(ab['missed_unanswerable'])}" if ab["missed_unanswerable"] else "")
        )
    if ab["answerable"]:
        lines.append(
            f"  answerable wrongly flagged: {len(ab['wrongly_flagged'])}/{ab['answerable']} "
            f"({_pct(ab['answerable_flagged'])})"
            + (f": {_ids(ab['wrongly_flagged'])}" if ab["wrongly_flagged"] else "")
        )
    return lines


def render(report: dict[str, Any]) -> str:
    k = report["k"]
    params = report["parameters"]
    lines: list[str] = []
    if report["kind"] == "beir":
        lines.append(
            f"BEIR {report['dataset']}: {report['queries']} queries, {report['documents']} "
            f"documents (database {report['database']})"
        )
    else:
        lines.append(
            f"{report['questions_file']}: {report['questions']} questions "
            f"({report['answerable']} answerable, {report['unanswerable']} unanswerable) over "
            f"{report['documents']} documents ({report['corpus']})"
        )
    lines.append(
        f"model {params['embedding_model']} ({params['embedding_dims']} dims), chunks "
        f"{params['chunk_tokens']}/{params['chunk_overlap']} tokens, candidates "
        f"{params['vector_candidates']}+{params['keyword_candidates']}, rrf_k {params['rrf_k']}, "
        f"keyword ranking {params['keyword_ranking']}; document level"
    )
    lines.append("")
    lines += _retriever_table(report["retrievers"], k, report.get("reranked"))
    kinds = _kind_table(report["retrievers"], k)
    if kinds:
        lines.append("")
        lines += kinds
    if "abstention" in report:
        lines.append("")
        lines += _abstention_lines(report["abstention"])
    holdout = report.get("holdout")
    if holdout:
        lines.append("")
        lines.append(f"held-out questions ({holdout['questions_file']}, {holdout['questions']}):")
        lines += _retriever_table(holdout["retrievers"], k, None)
        held_kinds = _kind_table(holdout["retrievers"], k)
        if held_kinds:
            lines += held_kinds[:-1]
        lines += _abstention_lines(holdout["abstention"])
    calibration = report.get("calibration")
    if calibration:
        lines.append("")
        fitted = calibration["calibration_set"]
        lines.append(f"calibrated and stored: {calibration['rule']}")
        lines.append(
            f"  on the calibration questions: flags {_pct(fitted['unanswerable_flagged'])} of "
            f"unanswerable, {_pct(fitted['answerable_flagged'])} of answerable"
        )
        if calibration.get("holdout"):
            held = calibration["holdout"]
            lines.append(
                f"  on the held-out questions:    flags {_pct(held['unanswerable_flagged'])} of "
                f"unanswerable, {_pct(held['answerable_flagged'])} of answerable"
            )
    for name in report.get("missing_sources") or []:
        lines.append(f"warning: expected source {name} matches no stored document")
    return "\n".join(lines)
