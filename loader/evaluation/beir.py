"""Reading a BEIR-format dataset: ``corpus.jsonl``, ``queries.jsonl`` and the relevance judgements.

- ``corpus.jsonl``: one JSON object a line, ``{"_id", "title", "text"}`` (title may be empty);
- ``queries.jsonl``: ``{"_id", "text"}``;
- qrels: ``qrels.tsv`` in the dataset folder, else ``qrels/<split>.tsv`` (default split
  ``test``); tab-separated ``query-id  corpus-id  score`` with an optional header line.

Only queries with at least one positive judgement are evaluated (as BEIR does).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path

from loader.errors import PgkbError


class BeirFormatError(PgkbError):
    """The dataset folder is not in BEIR format, or one of its lines is malformed."""


@dataclasses.dataclass(frozen=True)
class BeirDocument:
    id: str
    title: str
    text: str


@dataclasses.dataclass
class BeirDataset:
    path: Path
    name: str
    qrels_file: Path
    queries: dict[str, str]
    """Query id -> text, only the queries that have positive judgements."""
    qrels: dict[str, dict[str, int]]
    """Query id -> {corpus id: grade > 0}."""

    @property
    def corpus_file(self) -> Path:
        return self.path / "corpus.jsonl"

    def documents(self) -> Iterator[BeirDocument]:
        """The corpus, read lazily line by line."""
        yield from read_corpus(self.corpus_file)

    def corpus_size(self) -> int:
        with self.corpus_file.open("rb") as fh:
            return sum(1 for line in fh if line.strip())


def dataset_name(path: Path) -> str:
    """A short name for the dataset folder (``scifact-train``), safe inside identifiers."""
    name = re.sub(r"[^a-z0-9]+", "_", path.resolve().name.lower()).strip("_")
    return name or "dataset"


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj: object = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BeirFormatError(
                        f"{path}, line {lineno}: not valid JSON ({exc.msg})"
                    ) from None
                if not isinstance(obj, dict):
                    raise BeirFormatError(f"{path}, line {lineno}: expected a JSON object")
                yield lineno, obj
    except FileNotFoundError:
        raise BeirFormatError(
            f"{path} does not exist",
            hint="a BEIR dataset folder holds corpus.jsonl, queries.jsonl and qrels.tsv "
            "(or qrels/test.tsv)",
        ) from None


def read_corpus(path: Path) -> Iterator[BeirDocument]:
    for lineno, obj in _jsonl(path):
        doc_id = obj.get("_id")
        if doc_id is None or str(doc_id).strip() == "":
            raise BeirFormatError(f"{path}, line {lineno}: the document has no '_id'")
        title = obj.get("title") or ""
        text = obj.get("text") or ""
        if not isinstance(title, str) or not isinstance(text, str):
            raise BeirFormatError(f"{path}, line {lineno}: 'title' and 'text' must be strings")
        yield BeirDocument(str(doc_id), title.strip(), text.strip())


def find_qrels(path: Path, split: str = "test") -> Path:
    for candidate in (path / "qrels.tsv", path / "qrels" / f"{split}.tsv"):
        if candidate.is_file():
            return candidate
    raise BeirFormatError(
        f"{path} has no relevance judgements: neither qrels.tsv nor qrels/{split}.tsv exists",
        hint="pass the folder of a BEIR dataset (e.g. scifact), or --split for another qrels file",
    )


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                parts = line.split()
            if len(parts) == 4:  # TREC style: qid 0 docid grade
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise BeirFormatError(
                    f"{path}, line {lineno}: expected 'query-id<TAB>corpus-id<TAB>score'"
                )
            qid, doc_id, score = (p.strip() for p in parts)
            try:
                grade = int(float(score))
            except ValueError:
                if lineno == 1:
                    continue  # the header line
                raise BeirFormatError(
                    f"{path}, line {lineno}: score {score!r} is not a number"
                ) from None
            if grade > 0:
                qrels.setdefault(qid, {})[doc_id] = grade
    if not qrels:
        raise BeirFormatError(f"{path} holds no positive relevance judgement")
    return qrels


def load_beir(
    path: str | Path, split: str = "test", qrels_file: str | Path | None = None
) -> BeirDataset:
    """Read the queries and judgements of the dataset in ``path`` (the corpus stays on disk).

    ``qrels_file`` replaces the dataset's own judgements (e.g. one fixed half of its queries,
    ``eval/scifact/train-tune.tsv``); only the queries it judges are evaluated.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise BeirFormatError(
            f"{folder} is not a folder",
            hint="pass the folder of a BEIR dataset (corpus.jsonl, queries.jsonl, qrels.tsv)",
        )
    if not (folder / "corpus.jsonl").is_file():
        raise BeirFormatError(f"{folder} has no corpus.jsonl; is it a BEIR dataset folder?")
    if qrels_file is None:
        qrels_path = find_qrels(folder, split)
    else:
        qrels_path = Path(qrels_file)
        if not qrels_path.is_file():
            raise BeirFormatError(
                f"qrels file {qrels_path} does not exist",
                hint="pass a tab-separated 'query-id  corpus-id  score' file",
            )
    qrels = read_qrels(qrels_path)
    queries: dict[str, str] = {}
    for lineno, obj in _jsonl(folder / "queries.jsonl"):
        qid, text = obj.get("_id"), obj.get("text")
        if qid is None or not isinstance(text, str):
            raise BeirFormatError(
                f"{folder / 'queries.jsonl'}, line {lineno}: expected {{'_id', 'text'}}"
            )
        if str(qid) in qrels and text.strip():
            queries[str(qid)] = text.strip()
    missing = sorted(set(qrels) - set(queries))
    if len(missing) == len(qrels):
        raise BeirFormatError(
            f"none of the {len(qrels)} judged queries of {qrels_path} is in queries.jsonl"
        )
    judged = {qid: rel for qid, rel in qrels.items() if qid in queries}
    return BeirDataset(
        folder, dataset_name(folder), qrels_path, dict(sorted(queries.items())), judged
    )
