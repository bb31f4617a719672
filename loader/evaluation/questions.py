"""Evaluation question sets: reading and checking them, and matching expected sources.

A question file is a JSON list of objects ``{"id", "question", "kind", "sources": [...]}``;
``kind`` is one of :data:`KINDS`; ``sources`` names the documents that answer the question
(all of them, at least two, for ``multipage``) and is empty exactly for ``unanswerable``
questions. Other keys (``evidence``, ``why``) are
documentation and are ignored.

An expected source matches a stored document when it equals its ``source_uri`` or is a path
suffix of it (``sql-createindex.html`` matches ``/any/dir/sql-createindex.html`` and
``file:///any/dir/sql-createindex.html``, never ``old-sql-createindex.html``), so question
files are portable between machines.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from loader import resources
from loader.errors import PgkbError

KINDS = ("exact", "paraphrase", "conceptual", "multipage", "unanswerable")
"""``multipage``: the answer needs several pages and ``sources`` lists them all (at least two).
Its recall@k is the share of those pages in the top k (as for any question with several
sources), so finding one of two pages counts 0.5; MRR counts the first of them found."""


def default_questions_file() -> Path:
    """``eval/questions.json`` (of the source tree, or the copy an installed wheel carries)."""
    return resources.eval_dir() / "questions.json"


def default_holdout_file() -> Path:
    """``eval/questions-holdout.json``: held out from calibration, to check it generalises."""
    return resources.eval_dir() / "questions-holdout.json"


@dataclasses.dataclass(frozen=True)
class Question:
    id: str
    question: str
    kind: str
    sources: tuple[str, ...]

    @property
    def answerable(self) -> bool:
        return self.kind != "unanswerable"


class QuestionFileError(PgkbError):
    """A question file is missing or malformed."""


def load_questions(path: str | Path) -> list[Question]:
    """Read and check a question file; errors name the file, the entry and what to fix."""
    path = Path(path)
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise QuestionFileError(
            f"question file {path} does not exist",
            hint="pass --questions FILE (a JSON list of {id, question, kind, sources})",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionFileError(f"cannot read question file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise QuestionFileError(
            f"question file {path} is not valid JSON: line {exc.lineno}: {exc.msg}"
        ) from None
    if not isinstance(data, list) or not data:
        raise QuestionFileError(
            f"question file {path} must hold a non-empty JSON list of questions"
        )
    questions: list[Question] = []
    seen: set[str] = set()
    entries: list[object] = data
    for index, entry in enumerate(entries):
        where = f"question file {path}, entry {index}"
        if not isinstance(entry, dict):
            raise QuestionFileError(f"{where}: expected an object, got {type(entry).__name__}")
        item: dict[str, object] = entry
        qid = item.get("id")
        where = f"{where} (id {qid!r})"
        text = item.get("question")
        kind = item.get("kind")
        sources = item.get("sources")
        if not isinstance(qid, str) or not qid.strip():
            raise QuestionFileError(f"{where}: 'id' must be a non-empty string")
        if qid in seen:
            raise QuestionFileError(f"{where}: duplicate id")
        seen.add(qid)
        if not isinstance(text, str) or not text.strip():
            raise QuestionFileError(f"{where}: 'question' must be a non-empty string")
        if kind not in KINDS:
            raise QuestionFileError(
                f"{where}: 'kind' must be one of {', '.join(KINDS)}, got {kind!r}"
            )
        if not isinstance(sources, list) or not all(
            isinstance(s, str) and s.strip() for s in sources
        ):
            raise QuestionFileError(f"{where}: 'sources' must be a list of file names or URIs")
        names = [s.strip() for s in sources if isinstance(s, str)]
        if kind == "unanswerable" and sources:
            raise QuestionFileError(f"{where}: an unanswerable question must have no sources")
        if kind != "unanswerable" and not sources:
            raise QuestionFileError(
                f"{where}: a {kind} question needs at least one source",
                hint="name the file that answers it, or make it kind 'unanswerable'",
            )
        if kind == "multipage" and len(set(sources)) < 2:
            raise QuestionFileError(
                f"{where}: a multipage question needs at least two sources",
                hint="list every page the answer needs, or use another kind",
            )
        questions.append(Question(qid, text.strip(), str(kind), tuple(names)))
    return questions


def source_matches(expected: str, source_uri: str) -> bool:
    """Does the expected source ``expected`` name the stored document ``source_uri``?"""
    if expected == source_uri:
        return True
    expected = expected.replace("\\", "/")
    uri = source_uri.replace("\\", "/")
    return uri.endswith(expected) and uri[len(uri) - len(expected) - 1] in "/:"


def label_ranking(ranked_uris: Sequence[str], expected: Sequence[str]) -> list[str]:
    """``ranked_uris`` with every document that an expected source names replaced by that name.

    The result can be scored against ``{source: 1 for source in expected}``.
    """
    labelled = []
    for uri in ranked_uris:
        label = next((e for e in expected if source_matches(e, uri)), uri)
        labelled.append(label)
    return labelled


def unmatched_sources(questions: Iterable[Question], uris: Iterable[str]) -> list[str]:
    """Expected sources that name no stored document (a question file / corpus mismatch)."""
    stored = list(uris)
    names = {s for q in questions for s in q.sources}
    by_basename: dict[str, list[str]] = {}
    for uri in stored:
        by_basename.setdefault(uri.replace("\\", "/").rsplit("/", 1)[-1], []).append(uri)
    missing = []
    for name in sorted(names):
        candidates = by_basename.get(name.replace("\\", "/").rsplit("/", 1)[-1], [])
        if name in stored:
            continue
        if not any(source_matches(name, uri) for uri in candidates or stored):
            missing.append(name)
    return missing
