"""The recorded baseline (``eval/baseline.json``) and how to update it.

The baseline holds the current figures of ``pgkb eval`` on the bundled questions (section
``bundled``) and of ``pgkb eval --beir`` on benchmark datasets (section ``beir``, one entry per
dataset), each with the model and the retrieval parameters that produced it. The suite fails
when the bundled hybrid recall@5 drops more than :data:`TOLERANCE` below it.

Update it from a report after a change the eval says is better::

    pgkb eval --json > /tmp/eval.json
    pgkb eval --beir DIR --json > /tmp/beir.json
    python -m loader.evaluation.baseline /tmp/eval.json /tmp/beir.json
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

from loader.errors import PgkbError

TOLERANCE = 0.02
BASELINE_FILE = Path(__file__).resolve().parent.parent.parent / "eval" / "baseline.json"


_ROOT = BASELINE_FILE.parent.parent


def _portable(path: str) -> str:
    """``path`` relative to the source tree when it lies inside it (the baseline is shared)."""
    try:
        return str(Path(path).resolve().relative_to(_ROOT))
    except ValueError:
        return path


def _env_prefix(parameters: dict[str, Any]) -> str:
    """``PGKB_X=value `` for every recorded parameter that differs from its default."""
    from loader.settings import Settings

    defaults = Settings()
    parts = []
    for name, value in parameters.items():
        default = getattr(defaults, name, value)
        if value != default and value is not None:
            parts.append(f"PGKB_{name.upper()}={value}")
    return "".join(part + " " for part in parts)


def summarize(report: dict[str, Any], command: str | None = None) -> dict[str, Any]:
    """The part of an eval report the baseline keeps (no per-question detail)."""
    prefix = _env_prefix(report["parameters"])
    retrievers = {
        mode: {
            **entry["overall"],
            **({"by_kind": entry["by_kind"]} if entry.get("by_kind") else {}),
        }
        for mode, entry in report["retrievers"].items()
    }
    entry: dict[str, Any] = {
        "recorded": datetime.date.today().isoformat(),
        "k": report["k"],
        "parameters": report["parameters"],
        "retrievers": retrievers,
        "reranked": report.get("reranked"),
    }
    if report["kind"] == "beir":
        entry.update(
            command=command or f"{prefix}pgkb eval --beir {report['path']} --json",
            dataset=report["dataset"],
            qrels=report["qrels"],
            documents=report["documents"],
            queries=report["queries"],
        )
        if report.get("abstention"):
            ab = report["abstention"]
            entry["abstention"] = {
                "rule": ab["rule"],
                "answerable": ab["answerable"],
                "answerable_flagged": ab["answerable_flagged"],
            }
    else:
        entry.update(
            command=command or f"{prefix}pgkb eval --json",
            questions_file=_portable(report["questions_file"]),
            corpus=_portable(report["corpus"]),
            documents=report["documents"],
            questions=report["questions"],
            abstention={k: v for k, v in report["abstention"].items()},
        )
        if report.get("holdout"):
            holdout = report["holdout"]
            entry["holdout"] = {
                "questions_file": _portable(holdout["questions_file"]),
                "retrievers": {m: e["overall"] for m, e in holdout["retrievers"].items()},
                "abstention": holdout["abstention"],
            }
    return entry


def load_baseline(path: Path = BASELINE_FILE) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise PgkbError(f"cannot read the baseline {path}: {exc}") from None
    if not isinstance(data, dict):
        raise PgkbError(f"the baseline {path} must hold a JSON object")
    return data


def record(report: dict[str, Any], path: Path = BASELINE_FILE) -> dict[str, Any]:
    """Merge ``report`` into the baseline file; returns the new baseline."""
    baseline = load_baseline(path)
    entry = summarize(report)
    if report["kind"] == "beir":
        baseline.setdefault("beir", {})[report["dataset"]] = entry
    else:
        baseline["bundled"] = entry
    baseline["tolerance"] = {"hybrid_recall@5": TOLERANCE}
    path.write_text(json.dumps(baseline, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return baseline


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    for name in args:
        report = json.loads(Path(name).read_text(encoding="utf-8"))
        record(report)
        print(f"recorded {name} ({report['kind']}) in {BASELINE_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
