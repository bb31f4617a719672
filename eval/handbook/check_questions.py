"""Check the handbook question sets eval/handbook/questions-*.json.

Usage: python eval/handbook/check_questions.py [CORPUS_DIR]

CORPUS_DIR defaults to eval/handbook/corpus. The checks are the manual checker's
(eval/manual/check_questions.py, reused here, not copied): JSON format, ids unique
across all files, every source page exists, every evidence phrase (one per source
for multipage questions, joined by " || ") occurs in its page's text, and unanswerable
questions have "sources": [] and a "why". Only the page text differs: Markdown markup
(heading hashes, list and table markers, emphasis, code ticks) is stripped before
whitespace is collapsed and the text compared case-insensitively; an evidence phrase
gets the same treatment, so one copied with its markup still matches.
Prints a summary per file and kind; exits 1 naming each question with a problem.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE / "corpus"


def _load_manual_checker() -> Any:
    path = HERE.parent / "manual" / "check_questions.py"
    spec = importlib.util.spec_from_file_location("manual_check_questions", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the manual question checker at {path}")
    module = importlib.util.module_from_spec(spec)  # attributes used: normalise, check_file
    spec.loader.exec_module(module)
    return module


checker = _load_manual_checker()


def strip_markdown(text: str) -> str:
    """Markdown source to plain text: what a reader sees, words and punctuation only."""
    lines = []
    for line in text.splitlines():
        if re.fullmatch(r"\s*\|?[\s:|-]*-{3,}[\s:|-]*\|?\s*", line):
            continue  # table separator row
        line = re.sub(r"^\s{0,3}#{1,6}\s+", "", line)  # heading marker
        line = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)  # list marker
        line = line.replace("|", " ")  # table cells
        line = re.sub(r"(\*\*|__|`)", "", line)  # strong emphasis, code ticks
        line = re.sub(r"(?<!\w)\*(?=\S)(.+?)(?<=\S)\*(?!\w)", r"\1", line)  # *emphasis*
        lines.append(line)
    return "\n".join(lines)


def markdown_text(path: Path) -> str:
    text: str = checker.normalise(
        strip_markdown(path.read_text(encoding="utf-8", errors="replace"))
    )
    return text


def evidence_in(evidence: str, page: str) -> bool:
    return checker.normalise(strip_markdown(evidence)) in page


def main(argv: list[str]) -> int:
    return check_folder(argv, HERE, DEFAULT_CORPUS, "the handbook's")


def check_folder(argv: list[str], here: Path, default_corpus: Path, whose: str) -> int:
    """Check every questions-*.json in ``here`` against a Markdown corpus (``argv[1]``, else
    ``default_corpus``); ``whose`` names the corpus in the error for a missing folder. The
    help centre's checker calls this too."""
    corpus = (Path(argv[1]) if len(argv) > 1 else default_corpus).resolve()
    if not corpus.is_dir():
        print(
            f"corpus folder {corpus} does not exist: pass {whose} corpus folder",
            file=sys.stderr,
        )
        return 2
    files = sorted(here.glob("questions-*.json"))
    if not files:
        print(f"no questions-*.json files in {here}", file=sys.stderr)
        return 2
    checker.visible_text = markdown_text
    checker.evidence_in = evidence_in
    # the tuning and held-out halves hold the same questions as the hands' files: ids are
    # unique among the hands' files and among the halves, each group checked on its own
    halves = [p for p in files if p.stem.endswith(("-tune", "-heldout"))]
    hands = [p for p in files if p not in halves]
    cache: dict[str, str] = {}
    problems: list[str] = []
    counted: set[str] = set()
    for group in (hands, halves):
        seen: dict[str, str] = {}
        for path in group:
            problems += checker.check_file(path, corpus, seen, cache)
        counted.update(seen)
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)
    print(f"{len(counted)} questions in {len(files)} file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
