"""Abstention lab: collect each question's retrieval evidence once, then try gate signals and
rules on it in seconds.

``collect`` runs every question of a set through the hybrid search of the database in
PGKB_DATABASE_URL (the pipeline ``pgkb ask`` uses) and caches, per question, the gate's signals
(:func:`loader.answer.abstention.compute_signals`) with the labels (answerable or not, kind, set
half). ``fit`` learns the rule from the tuning halves of several sets at once (each set's
answerable false-flag rate bounded on its own) and prints caught / false per half, tuning and
held-out.

    python bench/abstention_lab.py collect --questions eval/manual/questions-tune.json \
        --name manual-tune
    python bench/abstention_lab.py collect --beir DIR --qrels eval/scifact/train-tune.tsv \
        --name scifact-tune
    python bench/abstention_lab.py fit --tune manual-tune,scifact-tune \
        --heldout manual-heldout,scifact-heldout
    python bench/abstention_lab.py search --tune manual-tune,scifact-tune \
        --heldout manual-heldout,scifact-heldout --max-fp 0.05

``search`` is a wider search than ``fit`` (a beam over clause sets instead of calibrate's greedy
choice), for the default rule and the trade-off curve.

Fitting reads only the tuning halves; the held-out halves are only scored.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import time
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("PGKB_LAB_CACHE", "/work/cache/quality"))


def _items(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.questions:
        from loader.evaluation.questions import load_questions

        return [
            {
                "id": q.id,
                "text": q.question,
                "kind": q.kind,
                "answerable": bool(q.sources),
                "hand": getattr(q, "hand", None),
            }
            for q in load_questions(Path(args.questions))
        ]
    from loader.evaluation.beir import load_beir

    ds = load_beir(Path(args.beir), qrels_file=Path(args.qrels) if args.qrels else None)
    return [
        {"id": qid, "text": text, "kind": "beir", "answerable": bool(ds.qrels.get(qid))}
        for qid, text in ds.queries.items()
        if qid in ds.qrels
    ]


def cmd_collect(args: argparse.Namespace) -> None:
    from loader.answer.abstention import compute_signals
    from loader.answer.abstention.profile import ensure_profile
    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.search import search
    from loader.settings import load_settings

    settings = load_settings()
    embedder = get_embedder(settings)
    items = _items(args)
    if args.limit:
        items = items[: args.limit]
    rows = []
    started = time.monotonic()
    with connection(settings) as conn:
        print("similarity profile:", ensure_profile(conn, embedder.embed))
        for it in items:
            embedding = embedder.embed_query(it["text"])
            hits = search(conn, it["text"], embedding, settings=settings, mode="hybrid")
            signals = compute_signals(conn, it["text"], hits, embed=embedder.embed)
            conn.rollback()
            rows.append({**it, "signals": signals})
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / f"abst-{args.name}.pkl").write_bytes(pickle.dumps(rows))
    print(f"collected {len(rows)} questions ({args.name}) in {time.monotonic() - started:.0f} s")


def _load(names: str) -> dict[str, list[dict[str, Any]]]:
    return {
        name: pickle.loads((CACHE / f"abst-{name}.pkl").read_bytes()) for name in names.split(",")
    }


def _rates(rule: Any, rows: list[dict[str, Any]]) -> str:
    un = [r for r in rows if not r["answerable"]]
    an = [r for r in rows if r["answerable"]]
    caught = sum(rule.matching_clause(r["signals"]) is not None for r in un)
    wrong = sum(rule.matching_clause(r["signals"]) is not None for r in an)
    c = f"{caught}/{len(un)} ({caught / len(un):.0%})" if un else "-"
    w = f"{wrong}/{len(an)} ({wrong / len(an):.1%})" if an else "-"
    return f"caught {c:16s} answerable flagged {w}"


def cmd_fit(args: argparse.Namespace) -> None:
    from loader.evaluation.calibrate import DIRECTIONS, Sample, calibrate

    tune = _load(args.tune)
    samples = [
        Sample(f"{name}:{r['id']}", r["signals"], not r["answerable"], group=name)
        for name, rows in tune.items()
        for r in rows
    ]
    directions = dict(DIRECTIONS)
    if args.signals:
        directions = {k: v for k, v in directions.items() if k in args.signals.split(",")}
    rule, report = calibrate(
        samples,
        max_false_positive_rate=args.max_fp,
        max_clauses=args.max_clauses,
        directions=directions,
    )
    print("rule:", rule.describe())
    print(json.dumps({k: v for k, v in report.items() if "flagged" in k}, indent=1)[:2000])
    for name, rows in tune.items():
        print(f"  tune    {name:22s} {_rates(rule, rows)}")
    if args.heldout:
        for name, rows in _load(args.heldout).items():
            print(f"  heldout {name:22s} {_rates(rule, rows)}")
    if args.save:
        Path(args.save).write_text(json.dumps(rule.to_json(), indent=1))


def _clause_mask(rows: list[dict[str, Any]], clause: tuple[Any, ...]) -> int:
    """The rows ``clause`` flags, as a bit mask (bit i: row i)."""
    mask = 0
    for i, r in enumerate(rows):
        if all(c.holds(r["signals"]) for c in clause):
            mask |= 1 << i
    return mask


def cmd_search(args: argparse.Namespace) -> None:
    """Beam search (width 30, up to ``--max-clauses``) over clauses of one or two threshold
    tests (33 quantiles of the pooled tuning values per signal): the rule with the highest mean
    share caught over the tuning halves that have unanswerable questions, with each tuning
    half's false flags at most ``--max-fp`` of its answerable questions (rounded down)."""
    import itertools

    from loader.answer.abstention import AbstentionRule, Condition
    from loader.evaluation.calibrate import DIRECTIONS

    tune = _load(args.tune)
    signals = args.signals.split(",") if args.signals else list(DIRECTIONS)
    conditions: dict[str, list[Any]] = {}
    for signal in signals:
        values = sorted(
            float(v)
            for rows in tune.values()
            for r in rows
            if (v := r["signals"].get(signal)) is not None
        )
        if signal == "unknown_names":
            picks = {1.0}
        else:
            picks = {round(values[round(q / 34 * (len(values) - 1))], 4) for q in range(1, 34)}
        conditions[signal] = [Condition(signal, DIRECTIONS[signal], t) for t in sorted(picks)]
    clauses: list[tuple[Any, ...]] = [(c,) for s in conditions for c in conditions[s]]
    for a, b in itertools.combinations(conditions, 2):
        clauses.extend((x, y) for x in conditions[a] for y in conditions[b])
    names = list(tune)
    positives = {n: _clause_mask(tune[n], ()) & ~_answerable_mask(tune[n]) for n in names}
    negatives = {n: _answerable_mask(tune[n]) for n in names}
    budget = {n: int(args.max_fp * negatives[n].bit_count() + 1e-9) for n in names}
    masks = [{n: _clause_mask(tune[n], c) for n in names} for c in clauses]

    def score(flags: dict[str, int]) -> float:
        if any((flags[n] & negatives[n]).bit_count() > budget[n] for n in names):
            return -1.0
        shares = [
            (flags[n] & positives[n]).bit_count() / positives[n].bit_count()
            for n in names
            if positives[n]
        ]
        return sum(shares) / max(len(shares), 1)

    Beam = tuple[tuple[Any, ...], dict[str, int], float]
    beam: list[Beam] = [((), dict.fromkeys(names, 0), 0.0)]
    best = beam[0]
    for _ in range(args.max_clauses):
        grown: list[Beam] = []
        for rule, flags, current in beam:
            for clause, mask in zip(clauses, masks, strict=True):
                merged = {n: flags[n] | mask[n] for n in names}
                value = score(merged)
                if value > current + 1e-9:
                    grown.append(((*rule, clause), merged, value))
        if not grown:
            break
        grown.sort(key=lambda item: -item[2])
        beam = grown[:30]
        best = max(best, beam[0], key=lambda item: item[2])
    rule = AbstentionRule(best[0], source="search")
    print("rule:", rule.describe())
    for name, rows in tune.items():
        print(f"  tune    {name:22s} {_rates(rule, rows)}")
    if args.heldout:
        for name, rows in _load(args.heldout).items():
            print(f"  heldout {name:22s} {_rates(rule, rows)}")


def _answerable_mask(rows: list[dict[str, Any]]) -> int:
    return sum(1 << i for i, r in enumerate(rows) if r["answerable"])


def cmd_score(args: argparse.Namespace) -> None:
    """Caught / flagged of one rule (``--rule`` JSON, else the shipped default) on each set."""
    from loader.answer.abstention import DEFAULT_RULE, AbstentionRule

    rule = AbstentionRule.from_json(args.rule, source="--rule") if args.rule else DEFAULT_RULE
    print("rule:", rule.describe())
    for name, rows in _load(args.name).items():
        print(f"  {name:30s} {_rates(rule, rows)}")


def cmd_import(args: argparse.Namespace) -> None:
    """Cache the per-question signals of a ``pgkb eval --json`` report (its main set, and its
    held-out set as ``<name>-holdout``) as collected sets, for ``score`` and ``separation``."""
    report = json.loads(Path(args.report).read_text(encoding="utf-8"))
    parts = {args.name: report}
    if report.get("holdout"):
        parts[f"{args.name}-holdout"] = report["holdout"]
    CACHE.mkdir(parents=True, exist_ok=True)
    for name, part in parts.items():
        rows = [
            {
                "id": q["id"],
                "text": q["question"],
                "kind": q["kind"],
                "answerable": bool(q["relevant"]),
                "signals": q["signals"],
            }
            for q in part.get("per_question") or part.get("per_query") or []
            if q.get("signals") is not None
        ]
        (CACHE / f"abst-{name}.pkl").write_bytes(pickle.dumps(rows))
        print(f"{name}: {len(rows)} questions")


def cmd_separation(args: argparse.Namespace) -> None:
    """How well each signal alone separates unanswerable from answerable questions, whatever the
    threshold: the area under its ROC curve (1.0 perfect, 0.5 chance; a missing value counts as
    the answerable side), over the given sets pooled."""
    from loader.evaluation.calibrate import DIRECTIONS

    rows = [r for group in _load(args.name).values() for r in group]
    print(f"{len(rows)} questions, {sum(not r['answerable'] for r in rows)} unanswerable")
    for signal, op in DIRECTIONS.items():

        def value(r: dict[str, Any], signal: str = signal, op: str = op) -> float:
            v = r["signals"].get(signal)
            if v is None:
                return -math.inf
            return float(v) if op.startswith(">") else -float(v)

        pos = [value(r) for r in rows if not r["answerable"]]
        neg = [value(r) for r in rows if r["answerable"]]
        pairs = [(p > n) + 0.5 * (p == n) for p in pos for n in neg]
        if pairs:
            print(f"  {signal:20s} {sum(pairs) / len(pairs):.3f}")


def cmd_show(args: argparse.Namespace) -> None:
    keys = args.signals.split(",")
    for name, rows in _load(args.name).items():
        for r in sorted(rows, key=lambda r: (r["answerable"], r["kind"])):
            vals = " ".join(
                f"{k}={r['signals'].get(k):.3f}"
                if isinstance(r["signals"].get(k), float)
                else f"{k}={r['signals'].get(k)}"
                for k in keys
            )
            print(
                f"{name} {'A' if r['answerable'] else 'U'} {r['kind'][:5]} {vals} {r['text'][:70]}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    col = sub.add_parser("collect")
    col.add_argument("--questions")
    col.add_argument("--beir")
    col.add_argument("--qrels")
    col.add_argument("--name", required=True)
    col.add_argument("--limit", type=int, help="the first N questions only")
    fit = sub.add_parser("fit")
    fit.add_argument("--tune", required=True)
    fit.add_argument("--heldout")
    fit.add_argument("--max-fp", type=float, default=0.04)
    fit.add_argument("--max-clauses", type=int, default=3)
    fit.add_argument("--save")
    fit.add_argument("--signals", help="only these signals (comma-separated)")
    search = sub.add_parser("search")
    search.add_argument("--tune", required=True)
    search.add_argument("--heldout")
    search.add_argument("--max-fp", type=float, default=0.05)
    search.add_argument("--max-clauses", type=int, default=3)
    search.add_argument("--signals", help="only these signals (comma-separated)")
    score = sub.add_parser("score")
    score.add_argument("--name", required=True, help="collected sets (comma-separated)")
    score.add_argument("--rule", help="a rule as JSON (default: the shipped default rule)")
    imp = sub.add_parser("import")
    imp.add_argument("--report", required=True, help="a pgkb eval --json report")
    imp.add_argument("--name", required=True)
    sep = sub.add_parser("separation")
    sep.add_argument("--name", required=True, help="collected sets (comma-separated), pooled")
    show = sub.add_parser("show")
    show.add_argument("--name", required=True)
    show.add_argument("--signals", required=True)
    args = parser.parse_args()
    {
        "collect": cmd_collect,
        "fit": cmd_fit,
        "search": cmd_search,
        "score": cmd_score,
        "separation": cmd_separation,
        "import": cmd_import,
        "show": cmd_show,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
