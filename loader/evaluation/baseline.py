"""The recorded baseline (``eval/baseline.json``): recording it, and checking a run against it.

The file holds one entry per question set under ``sets``: ``bundled`` (eval/questions.json),
``bundled-holdout`` (eval/questions-holdout.json), any other question file by its name (or
``--set NAME``), and a BEIR dataset by its name (``scifact_train``). A new set is one more
entry, written by the record command. Each entry is a :func:`loader.evaluation.gate.snapshot`
(figures per retriever, abstention, per-question ranks, parameters and model) plus where it
came from and the command that reproduces it. ``accepted_lower`` logs every recording that
lowered a figure, with its reason.

Record (refused when any set would get lower, by the gate's rules, unless ``--accept-lower``
gives the reason, which is stored)::

    pgkb eval --record-baseline                       # bundled + held-out sets
    pgkb eval --beir DIR --record-baseline
    python -m loader.evaluation.baseline record REPORT.json [...] [--accept-lower REASON]

Check (exit code 1 and the findings when the gate fails)::

    pgkb eval --check-baseline
    python -m loader.evaluation.baseline check REPORT.json [...]

where ``REPORT.json`` is the output of ``pgkb eval --json`` (or ``--beir DIR --json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from loader.errors import PgkbError
from loader.evaluation.gate import Finding, compare, snapshot, summary_line
from loader.evaluation.harness import parameters as recorded_defaults
from loader.evaluation.questions import default_holdout_file, default_questions_file
from loader.settings import Settings

BASELINE_FILE = Path(__file__).resolve().parent.parent.parent / "eval" / "baseline.json"
FORMAT = 2
ABOUT = (
    "Recorded by `pgkb eval --record-baseline` (or `python -m loader.evaluation.baseline "
    "record`); checked by tests/acceptance/test_eval_baseline.py and `pgkb eval --check-baseline`. "
    "Documentation: 'The eval gate' (docs/guides/evaluation.md)."
)

_ROOT = BASELINE_FILE.parent.parent


class GateFailed(PgkbError):
    """The run fell short of the baseline, or recording would lower it without a reason."""

    exit_code = 1


def _portable(path: str) -> str:
    """``path`` relative to the source tree when it lies inside it (the baseline is shared)."""
    try:
        return str(Path(path).resolve().relative_to(_ROOT))
    except ValueError:
        return path


def _env_prefix(parameters: dict[str, Any]) -> str:
    """``PGKB_X=value `` for every recorded parameter that differs from its default (the
    defaults as a run records them: the input limit and chunk size the default model makes)."""
    settings = Settings()
    defaults = recorded_defaults(settings)
    parts = []
    for name, value in parameters.items():
        if not hasattr(settings, name):
            continue
        if value != defaults.get(name, getattr(settings, name)) and value is not None:
            parts.append(f"PGKB_{name.upper()}={value}")
    return "".join(part + " " for part in parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "questions"


def _same_file(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == b.resolve()
    except OSError:
        return False


def set_names(report: dict[str, Any]) -> tuple[str, str | None]:
    """Names of the report's main set and of its held-out set (None without one).

    ``report["set"]`` (``pgkb eval --set NAME``) names the main set and ``NAME-holdout`` the
    held-out one; otherwise the bundled files are ``bundled`` and ``bundled-holdout``, other
    question files their file name without ``.json``, and a BEIR dataset its name.
    """
    if report["kind"] == "beir":
        return str(report.get("set") or report["dataset"]), None
    holdout = report.get("holdout")
    if report.get("set"):
        name = str(report["set"])
        return name, (f"{name}-holdout" if holdout else None)
    if _same_file(report["questions_file"], default_questions_file()):
        main = "bundled"
    else:
        main = _slug(Path(report["questions_file"]).stem)
    if not holdout:
        return main, None
    if _same_file(holdout["questions_file"], default_holdout_file()):
        return main, "bundled-holdout"
    return main, _slug(Path(holdout["questions_file"]).stem)


def _beir_options(report: dict[str, Any]) -> str:
    """``--qrels`` when the judgements are not the dataset's own, ``--set`` when named."""
    options = ""
    qrels = report.get("qrels")
    if qrels and Path(str(qrels)).resolve().parent != Path(str(report["path"])).resolve():
        options += f" --qrels {_portable(str(qrels))}"
    if report.get("set"):
        options += f" --set {report['set']}"
    return options


def report_sets(report: dict[str, Any], command: str | None = None) -> dict[str, dict[str, Any]]:
    """The baseline entries of every set an eval report covers, by set name."""
    k, parameters = report["k"], report["parameters"]
    prefix = _env_prefix(parameters)
    main, held = set_names(report)
    today = datetime.date.today().isoformat()
    out: dict[str, dict[str, Any]] = {}
    if report["kind"] == "beir":
        out[main] = {
            "kind": "beir",
            "recorded": today,
            "command": command
            or f"{prefix}pgkb eval --beir {report['path']}"
            f"{_beir_options(report)} --record-baseline",
            "dataset": report["dataset"],
            "qrels": report["qrels"],
            "documents": report["documents"],
            "queries": report["queries"],
            **snapshot(report, k=k, parameters=parameters),
            "reranked": report.get("reranked"),
        }
        return out
    options = "" if main in ("bundled",) else f" --questions {_portable(report['questions_file'])}"
    if report.get("set"):
        options += f" --set {report['set']}"
    default_corpus = _portable(report["corpus"]) == "loader/data/sample"
    if not default_corpus:
        options += f" --corpus {_portable(report['corpus'])}"
    if held and held != "bundled-holdout":
        options += f" --holdout {_portable(report['holdout']['questions_file'])}"
    cmd = command or f"{prefix}pgkb eval{options} --record-baseline"
    out[main] = {
        "kind": "questions",
        "recorded": today,
        "command": cmd,
        "questions_file": _portable(report["questions_file"]),
        "corpus": _portable(report["corpus"]),
        "documents": report["documents"],
        "questions": report["questions"],
        **snapshot(report, k=k, parameters=parameters),
        "reranked": report.get("reranked"),
    }
    if held:
        holdout = report["holdout"]
        out[held] = {
            "kind": "questions",
            "recorded": today,
            "command": cmd,
            "questions_file": _portable(holdout["questions_file"]),
            "corpus": _portable(report["corpus"]),
            "documents": report["documents"],
            "questions": holdout["questions"],
            **snapshot(holdout, k=k, parameters=parameters),
            "reranked": report.get("reranked"),
        }
    return out


# --- the file ---------------------------------------------------------------------------------


class Baseline(TypedDict, total=False):
    """The baseline file (``eval/baseline.json``): per question set, the recorded entry of
    :func:`report_sets`; the reasons a lower baseline was accepted."""

    about: str
    format: int
    tolerance: dict[str, str]
    sets: dict[str, dict[str, Any]]
    accepted_lower: list[dict[str, object]]


def load_baseline(path: Path = BASELINE_FILE) -> Baseline:
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"about": ABOUT, "format": FORMAT, "sets": {}}
    except (OSError, json.JSONDecodeError) as exc:
        raise PgkbError(f"cannot read the baseline {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sets"), dict):
        raise PgkbError(
            f"the baseline {path} must hold a JSON object with a 'sets' object (format {FORMAT})",
            hint="re-record it: pgkb eval --record-baseline",
        )
    return cast(Baseline, data)  # its shape checked above; each set's entry by compare()


def dumps(baseline: Mapping[str, object]) -> str:
    """The baseline as JSON, indented, with each question's row and each list of names on one
    line (a change to one question is a one-line diff)."""
    compact: dict[str, str] = {}

    def mark(value: Any) -> Any:
        token = f"@@{len(compact)}@@"
        compact[token] = json.dumps(value, ensure_ascii=False)
        return token

    def walk(value: Any, key: str | None = None, parent: str | None = None) -> Any:
        if parent == "per_question":
            return mark(value)
        if isinstance(value, dict):
            return {k: walk(v, k, key) for k, v in value.items()}
        if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
            return mark(value)
        if isinstance(value, list):
            return [walk(v, None, key) for v in value]
        return value

    text = json.dumps(walk(baseline), indent=2, ensure_ascii=False)
    for token, rendered in compact.items():
        text = text.replace(f'"{token}"', rendered, 1)
    return text + "\n"


# --- checking and recording -------------------------------------------------------------------


@dataclasses.dataclass
class Verdict:
    """The gate's findings on every set of one or more reports."""

    findings: list[Finding]
    summaries: list[str]

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.fails]

    @property
    def ok(self) -> bool:
        return not self.failed

    def render(self, path: Path = BASELINE_FILE) -> str:
        lines = [f"eval gate against {_portable(str(path))}:"]
        lines += [f"  {line}" for line in self.summaries]
        for finding in self.findings:
            mark = "FAIL" if finding.fails else "note"
            lines.append(f"  {mark} {finding}")
        if self.ok:
            lines.append("  passed")
        else:
            lines.append(
                f"  FAILED: {len(self.failed)} problem(s). If the change is meant, re-record: "
                "pgkb eval --record-baseline (a lower baseline needs --accept-lower REASON)"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.ok,
            "findings": [dataclasses.asdict(f) for f in self.findings],
        }


def check(
    reports: Sequence[dict[str, Any]],
    path: Path = BASELINE_FILE,
    sets: Sequence[str] | None = None,
) -> Verdict:
    """Check every set of ``reports`` (or only ``sets``) against the baseline at ``path``."""
    baseline = load_baseline(path)
    findings: list[Finding] = []
    summaries: list[str] = []
    for report in reports:
        for name, entry in report_sets(report).items():
            if sets is not None and name not in sets:
                continue
            recorded = baseline["sets"].get(name)
            summaries.append(summary_line(name, recorded, entry))
            if recorded is None:
                findings.append(
                    Finding(
                        name,
                        f"no recorded baseline for this set: record it with `{entry['command']}`",
                    )
                )
                continue
            findings += compare(name, recorded, entry)
    return Verdict(findings, summaries)


def record(
    reports: Sequence[dict[str, Any]],
    path: Path = BASELINE_FILE,
    *,
    accept_lower: str | None = None,
) -> tuple[Baseline, list[Finding]]:
    """Write every set of ``reports`` into the baseline at ``path``; returns the baseline and
    the findings that lowered it (recorded only with ``accept_lower``, the stored reason).

    Raises :class:`GateFailed` (nothing written) when a set would get lower without a reason.
    """
    if accept_lower is not None and not accept_lower.strip():
        raise PgkbError("--accept-lower needs a reason", hint='--accept-lower "why it is lower"')
    baseline = load_baseline(path)
    entries: dict[str, dict[str, Any]] = {}
    for report in reports:
        entries.update(report_sets(report))
    lowering: list[Finding] = []
    for name, entry in entries.items():
        recorded = baseline["sets"].get(name)
        if recorded is not None:
            lowering += [f for f in compare(name, recorded, entry) if f.lowers]
    if lowering and accept_lower is None:
        listing = "\n".join(f"  - {f}" for f in lowering)
        raise GateFailed(
            f"refusing to record a lower baseline in {_portable(str(path))}:\n{listing}",
            hint='if the drop is the price of a change you mean, say why: --accept-lower "reason"'
            " (the reason is stored in the baseline file)",
        )
    baseline["about"] = ABOUT
    baseline["format"] = FORMAT
    baseline["tolerance"] = {
        "top_k": "no relevant document may leave the top k (k = 5) of any retriever",
        "recall": "summed per-question losses <= 1 question (1/n of the mean)",
        "mrr_ndcg": "summed per-question losses <= 0.5 question (0.5/n of the mean)",
        "abstention": "no question newly missed or newly wrongly flagged",
        "parameters": "must equal the recorded ones",
    }
    sets = baseline.setdefault("sets", {})
    sets.update(entries)
    baseline["sets"] = dict(sorted(sets.items()))
    if lowering:
        baseline.setdefault("accepted_lower", []).append(
            {
                "recorded": datetime.date.today().isoformat(),
                "sets": sorted({f.set for f in lowering}),
                "reason": accept_lower,
                "regressions": [str(f) for f in lowering],
            }
        )
    path.write_text(dumps(baseline), encoding="utf-8")
    return baseline, lowering


# --- python -m loader.evaluation.baseline -----------------------------------------------------


def _read_report(name: str) -> dict[str, Any]:
    try:
        data: object = json.loads(Path(name).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PgkbError(
            f"cannot read the eval report {name}: {exc}",
            hint="write one with `pgkb eval --json > FILE`",
        ) from None
    if not isinstance(data, dict) or "kind" not in data or "retrievers" not in data:
        raise PgkbError(f"{name} is not a `pgkb eval --json` report")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loader.evaluation.baseline",
        description="Record eval reports (pgkb eval --json) in the baseline, or check them.",
    )
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("reports", nargs="+", metavar="REPORT.json")
    parser.add_argument("--baseline", type=Path, default=BASELINE_FILE)
    parser.add_argument("--accept-lower", metavar="REASON", default=None)
    args = parser.parse_args(argv)
    try:
        reports = [_read_report(name) for name in args.reports]
        if args.action == "check":
            if args.accept_lower is not None:
                raise PgkbError("--accept-lower only applies to `record`")
            verdict = check(reports, args.baseline)
            print(verdict.render(args.baseline))
            return 0 if verdict.ok else GateFailed.exit_code
        _, lowered = record(reports, args.baseline, accept_lower=args.accept_lower)
    except PgkbError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    names = ", ".join(name for report in reports for name in report_sets(report))
    print(f"recorded {names} in {args.baseline}", file=sys.stderr)
    if lowered:
        print(f"lower, accepted: {args.accept_lower}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
