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

Fitting reads only the tuning halves; the held-out halves are only scored.
"""

from __future__ import annotations

import argparse
import json
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
    show = sub.add_parser("show")
    show.add_argument("--name", required=True)
    show.add_argument("--signals", required=True)
    args = parser.parse_args()
    {"collect": cmd_collect, "fit": cmd_fit, "show": cmd_show}[args.cmd](args)


if __name__ == "__main__":
    main()
