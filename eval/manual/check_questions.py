"""Check the whole-manual question sets eval/manual/questions-*.json.

Usage: python eval/manual/check_questions.py [CORPUS_DIR]

CORPUS_DIR defaults to ../shared/corpora/postgresql-15-docs/html relative to the
repository root. For every question file it checks the JSON format, that ids are
unique across all files, that every source page exists in CORPUS_DIR, and that each
evidence phrase (split on " || " for multipage questions, one per source, in order)
occurs in its page's visible text (tags stripped, whitespace collapsed, compared
case-insensitively). Unanswerable questions need "sources": [] and a "why" field.
Prints a summary per file and kind; exits 1 naming each question with a problem.
Standard library only (html.parser; block elements separate words, inline tags do not).
"""

from __future__ import annotations

import collections
import html.parser
import json
import re
import sys
from pathlib import Path
from typing import ClassVar

KINDS = {"exact", "paraphrase", "conceptual", "multipage", "unanswerable"}
SEP = " || "
HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_CORPUS = REPO_ROOT / ".." / "shared" / "corpora" / "postgresql-15-docs" / "html"


class _TextParser(html.parser.HTMLParser):
    SKIP: ClassVar[frozenset[str]] = frozenset({"script", "style", "head", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    BLOCK: ClassVar[frozenset[str]] = frozenset(
        [
            "p",
            "div",
            "br",
            "li",
            "tr",
            "td",
            "th",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "dt",
            "dd",
            "pre",
            "table",
            "ul",
            "ol",
            "dl",
            "blockquote",
        ]
    )

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skip += 1
        if tag in self.BLOCK:
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skip:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def visible_text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8", errors="replace")
    parser = _TextParser()
    parser.feed(raw)
    return normalise("".join(parser.parts))


def evidence_in(evidence: str, page: str) -> bool:
    return normalise(evidence) in page


def check_file(path: Path, corpus: Path, seen: dict[str, str], cache: dict[str, str]) -> list[str]:
    problems: list[str] = []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return [f"{path.name}: not valid JSON ({exc})"]
    if not isinstance(data, list):
        return [f"{path.name}: top level must be a JSON list of question objects"]
    counts: collections.Counter[str] = collections.Counter()
    for n, q in enumerate(data):
        where = f"{path.name}[{n}]"
        if not isinstance(q, dict):
            problems.append(f"{where}: not an object")
            continue
        qid = q.get("id")
        if not isinstance(qid, str) or not qid:
            problems.append(f"{where}: missing string 'id'")
            continue
        where = f"{path.name} {qid}"
        if qid in seen:
            problems.append(f"{where}: duplicate id (also in {seen[qid]})")
        seen[qid] = path.name
        question = q.get("question")
        if not isinstance(question, str) or not question.strip():
            problems.append(f"{where}: missing 'question' text")
        kind = q.get("kind")
        if kind not in KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {sorted(KINDS)}")
            continue
        counts[kind] += 1
        sources = q.get("sources")
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            problems.append(f"{where}: 'sources' must be a list of page file names")
            continue
        if kind == "unanswerable":
            if sources:
                problems.append(f'{where}: unanswerable question must have "sources": []')
            if not isinstance(q.get("why"), str) or not q["why"].strip():
                problems.append(f"{where}: unanswerable question needs a 'why' field")
            continue
        if not sources:
            problems.append(f"{where}: answerable question without sources")
            continue
        if len(set(sources)) != len(sources):
            problems.append(f"{where}: a source is listed twice")
        evidence = q.get("evidence")
        if not isinstance(evidence, str) or not evidence.strip():
            problems.append(f"{where}: missing 'evidence'")
            continue
        if kind == "multipage":
            if len(sources) < 2:
                problems.append(f"{where}: multipage question needs at least 2 sources")
            phrases = evidence.split(SEP)
            if len(phrases) != len(sources):
                problems.append(
                    f"{where}: {len(phrases)} evidence phrases for {len(sources)} sources "
                    f"(join one phrase per source with {SEP!r})"
                )
                continue
            pairs = list(zip(sources, phrases, strict=True))
        else:
            # Several pages may answer the question equally well: the evidence must
            # occur in at least one of them (every page must exist).
            pairs = [(s, evidence) for s in sources]
        found_any = False
        for source, phrase in pairs:
            page_path = corpus / source
            if source != Path(source).name or not page_path.is_file():
                problems.append(f"{where}: source page {source!r} not found in {corpus}")
                continue
            if source not in cache:
                cache[source] = visible_text(page_path)
            ok = evidence_in(phrase, cache[source])
            if kind == "multipage" and not ok:
                problems.append(f"{where}: evidence {phrase!r} not found in {source}")
            found_any = found_any or ok
        if kind != "multipage" and not found_any:
            problems.append(f"{where}: evidence {evidence!r} not found in {', '.join(sources)}")
    total = sum(counts.values())
    summary = ", ".join(f"{k} {counts[k]}" for k in sorted(counts))
    print(
        f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}: "
        f"{total} questions ({summary})"
    )
    return problems


def main(argv: list[str]) -> int:
    corpus = Path(argv[1]) if len(argv) > 1 else DEFAULT_CORPUS
    corpus = corpus.resolve()
    if not corpus.is_dir():
        print(
            f"corpus folder {corpus} does not exist: pass the manual's html folder", file=sys.stderr
        )
        return 2
    files = sorted(HERE.glob("questions-*.json"))
    if not files:
        print(f"no questions-*.json files in {HERE}", file=sys.stderr)
        return 2
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
            problems += check_file(path, corpus, seen, cache)
        counted.update(seen)
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)
    print(f"{len(counted)} questions in {len(files)} file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
