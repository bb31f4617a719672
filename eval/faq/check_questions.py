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
    module = importlib.util.module_from_spec(spec)  # attribute used: check_folder
    spec.loader.exec_module(module)
    return module


handbook = _load_handbook_checker()


def main(argv: list[str]) -> int:
    return int(handbook.check_folder(argv, HERE, DEFAULT_CORPUS, "the help centre's"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
