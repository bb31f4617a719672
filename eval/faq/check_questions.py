"""Check the help-centre question sets eval/faq/questions-*.json.

Usage: python eval/faq/check_questions.py [CORPUS_DIR]

CORPUS_DIR defaults to eval/faq/corpus. The corpus is Markdown like the staff
handbook's, so the checks are the handbook checker's (eval/handbook/check_questions.py,
reused here, not copied; it in turn reuses the manual checker): JSON format, ids unique
across all files, every source page exists, every evidence phrase (one per source for
multipage questions, joined by " || ") occurs in its page's text with Markdown markup
stripped, whitespace collapsed and case ignored, and unanswerable questions have
"sources": [] and a "why".
Prints a summary per file and kind; exits 1 naming each question with a problem.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE / "corpus"


def _load_handbook_checker() -> Any:
    path = HERE.parent / "handbook" / "check_questions.py"
    spec = importlib.util.spec_from_file_location("handbook_check_questions", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the handbook question checker at {path}")
    module = importlib.util.module_from_spec(spec)  # attributes used: checker, markdown_text,
    spec.loader.exec_module(module)  # evidence_in
    return module


handbook = _load_handbook_checker()


def main(argv: list[str]) -> int:
    corpus = (Path(argv[1]) if len(argv) > 1 else DEFAULT_CORPUS).resolve()
    if not corpus.is_dir():
        print(
            f"corpus folder {corpus} does not exist: pass the help centre's corpus folder",
            file=sys.stderr,
        )
        return 2
    files = sorted(HERE.glob("questions-*.json"))
    if not files:
        print(f"no questions-*.json files in {HERE}", file=sys.stderr)
        return 2
    checker = handbook.checker
    checker.visible_text = handbook.markdown_text
    checker.evidence_in = handbook.evidence_in
    seen: dict[str, str] = {}
    cache: dict[str, str] = {}
    problems: list[str] = []
    for path in files:
        problems += checker.check_file(path, corpus, seen, cache)
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)
    print(f"{len(seen)} questions in {len(files)} file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
