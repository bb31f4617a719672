"""Training pairs for ``pgkb models tune``: (anchor, positive) texts a contrastive loss with
in-batch negatives pulls together.

Without labels, from the knowledge base's own structure and text (:func:`structure_pairs`):

- ``heading``: a section's heading path (``Title > Section > Subsection``) with the section's
  first passage;
- ``title``: a document's title with its lead (its first passage);
- ``span``: the inverse cloze task, a sentence of a passage (or, without one of a usable length,
  a run of words, as ``kb.pseudo_queries`` takes them) with the passage it was cut from, the
  sentence removed, so the model learns what a passage is about rather than to match words.

With labels (:func:`question_pairs`, :func:`beir_pairs`): a question with its source document's
passage that shares most of its words, and a BEIR query with each document judged relevant.

Pairs are deduplicated (:func:`dedupe`), ambiguous anchors (one heading path over several
passages) dropped, and every pair whose anchor is, contains or resembles an eval question is
held out (:func:`hold_out`), so the gate that decides activation is never run on what the model
was trained on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from loader.db.queries import TrainingPassage
from loader.evaluation.beir import load_beir
from loader.evaluation.questions import Question, source_matches

Render = Callable[[TrainingPassage], str]
"""The text the model reads for a stored passage (its title and heading prefix, then content)."""

MIN_PASSAGE_WORDS = 12
"""A positive shorter than this says too little to be learned from."""
SPAN_MIN_WORDS, SPAN_MAX_WORDS = 6, 40
"""The length of a sentence the inverse cloze task takes as its anchor."""
SPAN_PASSAGE_WORDS = 20
"""Passages shorter than this give no span (what is left would be too little)."""
WINDOW_WORDS = 10
"""A span without a usable sentence: this many consecutive words (as ``kb.pseudo_queries``)."""
SIMILAR = 0.6
"""Word-set Jaccard similarity from which an anchor counts as an eval question (held out)."""

_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


@dataclasses.dataclass(frozen=True)
class Pair:
    anchor: str
    positive: str
    kind: str
    """``heading``, ``title``, ``span`` (unlabelled), ``labelled`` (--pairs), ``beir``."""
    chunk_id: int = 0
    """The stored passage the positive comes from (0: none, as for a BEIR document)."""
    document_id: str = ""
    negative: str = ""
    """A hard negative (:func:`hard_negatives`): a passage close to the anchor that does not
    answer it; empty until one is chosen."""
    negative_kind: str = ""
    """``section`` (the same document's other section) or ``near-miss`` (BM25's)."""


def normalise(text: str) -> str:
    """Lower case words joined by single spaces: what two texts must share to be "the same"."""
    return " ".join(_WORD.findall(text.lower()))


def _words(text: str) -> list[str]:
    return text.split()


def _pick(seed: int, key: str, count: int) -> int:
    """A position in ``range(count)`` fixed by ``seed`` and ``key`` (same corpus, same pairs)."""
    digest = hashlib.sha256(f"pgkb-tune:{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def _span(passage: TrainingPassage, seed: int) -> tuple[str, str] | None:
    """(anchor, the content without it) for the inverse cloze task, or None."""
    content = passage.content.strip()
    if len(_words(content)) < SPAN_PASSAGE_WORDS:
        return None
    sentences = _sentences(content)
    usable = [
        i for i, s in enumerate(sentences) if SPAN_MIN_WORDS <= len(_words(s)) <= SPAN_MAX_WORDS
    ]
    if len(sentences) > 1 and usable:
        index = usable[_pick(seed, f"span:{_place(passage)}", len(usable))]
        rest = " ".join(s for i, s in enumerate(sentences) if i != index)
        return sentences[index], rest
    words = _words(content)
    first = _pick(seed, f"window:{_place(passage)}", len(words) - WINDOW_WORDS)
    anchor = " ".join(words[first : first + WINDOW_WORDS])
    rest = " ".join(words[:first] + words[first + WINDOW_WORDS :])
    return anchor, rest


def _titled(passage: TrainingPassage) -> str:
    """``Title > Section > ...``: the document title before its heading path (once)."""
    path = [p for p in passage.heading_path.split(" > ") if p.strip()]
    title = passage.title.strip()
    if title and (not path or normalise(path[0]) != normalise(title)):
        path.insert(0, title)
    return " > ".join(path)


def structure_pairs(
    passages: Iterable[TrainingPassage], render: Render, *, seed: int = 0
) -> list[Pair]:
    """The unlabelled pairs of a knowledge base's passages (any order): heading path with its
    section's first passage, title with lead, and a span of each passage with the rest of it
    (rendered as the model reads it at search time). Deduplicated; ambiguous anchors dropped."""
    by_document: dict[str, list[TrainingPassage]] = defaultdict(list)
    for passage in passages:
        by_document[passage.document_id].append(passage)
    pairs: list[Pair] = []
    documents = [sorted(group, key=lambda p: p.chunk_index) for group in by_document.values()]
    for chunks in sorted(documents, key=_document_order):
        lead = chunks[0]
        if lead.title.strip() and len(_words(lead.content)) >= MIN_PASSAGE_WORDS:
            pairs.append(
                Pair(
                    lead.title.strip(),
                    lead.content.strip(),
                    "title",
                    lead.chunk_id,
                    lead.document_id,
                )
            )
        seen_paths: set[str] = set()
        for passage in chunks:
            path = passage.heading_path.strip()
            if path and path not in seen_paths:
                seen_paths.add(path)
                if len(_words(passage.content)) >= MIN_PASSAGE_WORDS:
                    pairs.append(
                        Pair(
                            _titled(passage),
                            passage.content.strip(),
                            "heading",
                            passage.chunk_id,
                            passage.document_id,
                        )
                    )
            span = _span(passage, seed)
            if span is not None:
                anchor, rest = span
                cut = dataclasses.replace(passage, content=rest)
                pairs.append(
                    Pair(anchor, render(cut), "span", passage.chunk_id, passage.document_id)
                )
    return drop_ambiguous(dedupe(pairs))


def _document_order(chunks: Sequence[TrainingPassage]) -> tuple[object, ...]:
    """A document's place among the others, by what it holds: its source, then its text. Not
    by its id, which the database draws at random (``gen_random_uuid``): the same corpus in
    another order, or ingested again, would give the pairs in another order, and so another
    model (the trainer's batches are drawn by position)."""
    return (
        chunks[0].source_uri,
        chunks[0].title,
        [(p.chunk_index, p.heading_path, p.content) for p in chunks],
    )


def _place(passage: TrainingPassage) -> str:
    """A passage's key for the seeded picks: its text. Not its chunk id, which depends on what
    the database held before, nor its source, which moves with the folder: the same text gives
    the same span wherever and whenever it was ingested."""
    return passage.content


def dedupe(pairs: Iterable[Pair]) -> list[Pair]:
    """The pairs without repeats (same anchor and positive, up to case and punctuation) and
    without pairs whose anchor is its own positive; first occurrence kept, order kept."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for pair in pairs:
        anchor, positive = normalise(pair.anchor), normalise(pair.positive)
        if not anchor or not positive or anchor == positive or (anchor, positive) in seen:
            continue
        seen.add((anchor, positive))
        kept.append(pair)
    return kept


def drop_ambiguous(pairs: Sequence[Pair]) -> list[Pair]:
    """Without the unlabelled pairs whose anchor comes with several positives (a title shared
    by many pages, a generic heading): the loss would push each positive away from the others'
    anchor, which is the same text. Labelled pairs keep their several sources."""
    positives: dict[str, set[str]] = defaultdict(set)
    for pair in pairs:
        positives[normalise(pair.anchor)].add(normalise(pair.positive))
    return [
        p
        for p in pairs
        if p.kind in ("labelled", "beir") or len(positives[normalise(p.anchor)]) == 1
    ]


def _resembles(anchor: set[str], question: set[str]) -> bool:
    if not anchor or not question:
        return False
    return len(anchor & question) / len(anchor | question) >= SIMILAR


def hold_out(pairs: Sequence[Pair], questions: Iterable[str]) -> tuple[list[Pair], int]:
    """``pairs`` without those whose anchor is an eval question, contains one, is contained in
    one (four words or more), or shares :data:`SIMILAR` of its words with one; and the number
    held out."""
    texts = [normalise(q) for q in questions]
    texts = [t for t in texts if t]
    if not texts:
        return list(pairs), 0
    word_sets = [set(t.split()) for t in texts]
    postings: dict[str, list[int]] = defaultdict(list)
    for index, words in enumerate(word_sets):
        for word in words:
            postings[word].append(index)
    exact = set(texts)
    kept, dropped = [], 0
    for pair in pairs:
        anchor = normalise(pair.anchor)
        words = set(anchor.split())
        candidates = Counter(i for w in words for i in postings.get(w, ()))
        held = anchor in exact or any(
            _resembles(words, word_sets[i])
            or (len(words) >= 4 and f" {anchor} " in f" {texts[i]} ")
            or (len(word_sets[i]) >= 4 and f" {texts[i]} " in f" {anchor} ")
            for i in candidates
        )
        if held:
            dropped += 1
        else:
            kept.append(pair)
    return kept, dropped


def question_pairs(
    questions: Iterable[Question], passages: Sequence[TrainingPassage], render: Render
) -> tuple[list[Pair], list[str]]:
    """Labelled pairs (``--pairs FILE``, the eval's question format): each answerable question
    with, for each of its sources, the passage of that document sharing most of the question's
    words (the first one on a tie). Also the sources that name no stored document."""
    by_basename: dict[str, list[TrainingPassage]] = defaultdict(list)
    for passage in passages:
        by_basename[passage.source_uri.replace("\\", "/").rsplit("/", 1)[-1]].append(passage)
    pairs, missing = [], []
    for question in questions:
        if not question.answerable:
            continue
        words = set(normalise(question.question).split())
        for source in question.sources:
            name = source.replace("\\", "/").rsplit("/", 1)[-1]
            found = [p for p in by_basename.get(name, ()) if source_matches(source, p.source_uri)]
            if not found:
                missing.append(source)
                continue
            best = max(
                sorted(found, key=lambda p: (p.source_uri, p.chunk_index)),
                key=lambda p: len(words & set(normalise(p.content).split())),
            )
            pairs.append(
                Pair(question.question, render(best), "labelled", best.chunk_id, best.document_id)
            )
    return dedupe(pairs), sorted(set(missing))


def beir_pairs(
    folder: Path, *, split: str = "train", qrels_file: Path | None = None
) -> tuple[list[Pair], int]:
    """Labelled pairs of a BEIR dataset: each judged query (grade above 0) with the title and
    text of each document judged relevant; also the number of judged queries."""
    dataset = load_beir(folder, split, qrels_file)
    wanted = {doc for judged in dataset.qrels.values() for doc, grade in judged.items() if grade}
    texts = {}
    for document in dataset.documents():
        if document.id in wanted:
            title = document.title.strip()
            texts[document.id] = f"{title}\n\n{document.text}" if title else document.text
    pairs = [
        Pair(dataset.queries[qid], texts[doc], "beir")
        for qid in sorted(dataset.qrels)
        if qid in dataset.queries
        for doc, grade in sorted(dataset.qrels[qid].items())
        if grade > 0 and doc in texts
    ]
    return dedupe(pairs), len(dataset.qrels)


def digest(pairs: Iterable[Pair]) -> str:
    """sha256 of the pairs in order: what the model was trained on, in one value."""
    hasher = hashlib.sha256()
    for pair in pairs:
        hasher.update(pair.kind.encode() + b"\x00" + pair.anchor.encode() + b"\x00")
        hasher.update(pair.positive.encode() + b"\x01")
        if pair.negative:
            hasher.update(pair.negative_kind.encode() + b"\x00" + pair.negative.encode() + b"\x02")
    return hasher.hexdigest()


def counts(pairs: Iterable[Pair]) -> dict[str, int]:
    """The number of pairs of each kind."""
    return dict(sorted(Counter(p.kind for p in pairs).items()))


def negative_counts(pairs: Iterable[Pair]) -> dict[str, int]:
    """The number of hard negatives of each kind."""
    return dict(sorted(Counter(p.negative_kind for p in pairs if p.negative).items()))


def training_subset(pairs: Sequence[Pair], count: int, *, seed: int = 0) -> list[Pair]:
    """At most ``count`` of ``pairs`` (all of them when there are no more), picked by the seed
    and kept in their order: what a bounded training can read, chosen before hard negatives are
    looked for, so only those pairs cost a BM25 search."""
    if len(pairs) <= count:
        return list(pairs)

    def key(index: int) -> bytes:
        pair = pairs[index]
        text = f"pgkb-tune-subset:{seed}:{pair.kind}\x00{pair.anchor}\x00{pair.positive}"
        return hashlib.sha256(text.encode()).digest()

    chosen = sorted(sorted(range(len(pairs)), key=key)[:count])
    return [pairs[i] for i in chosen]


def hard_negatives(
    pairs: Sequence[Pair],
    passages: Sequence[TrainingPassage],
    near_misses: Mapping[str, Sequence[int]],
    render: Render,
    *,
    seed: int = 0,
) -> tuple[list[Pair], int]:
    """Each pair with a hard negative, a passage close to its anchor that does not answer it:

    - ``section``: another section of the positive's document (another heading path; not for
      a title, whose positive is what the whole document is about);
    - ``near-miss``: the best BM25 hit for the anchor (``near_misses``: chunk ids by rank, keyed
      by the anchor as :func:`normalise` gives it) in a document that gives the anchor none of
      its positives.

    When both exist, the seed picks one. A candidate is never one of the anchor's positives'
    passages or documents, nor a text that contains or is contained in one of its positives.
    The negative is given as the pair's positive is (the passage's content for a title or a
    heading pair, as the model reads it at search time otherwise). Pairs for which no negative
    is found are dropped (the loss takes one for every pair); their number is returned."""
    by_id = {p.chunk_id: p for p in passages}
    usable: dict[str, list[TrainingPassage]] = defaultdict(list)
    for passage in sorted(passages, key=lambda p: (p.document_id, p.chunk_index)):
        if len(_words(passage.content)) >= MIN_PASSAGE_WORDS:
            usable[passage.document_id].append(passage)
    positives: dict[str, list[tuple[Pair, str]]] = defaultdict(list)
    for pair in pairs:
        positives[normalise(pair.anchor)].append((pair, normalise(pair.positive)))

    def answers(key: str, candidate: TrainingPassage, text: str, *, documents: bool) -> bool:
        """Whether ``candidate`` is (or may be) one of the anchor's positives: its passage, its
        document (``documents``: not for the same document's other sections), or its text."""
        content = normalise(candidate.content)
        for own, positive in positives[key]:
            if candidate.chunk_id == own.chunk_id or (
                documents and candidate.document_id == own.document_id
            ):
                return True
            if content in positive or positive in text:
                return True
        return False

    kept, dropped = [], 0
    for pair in pairs:
        key = normalise(pair.anchor)
        raw = pair.kind in ("title", "heading")

        def shown(passage: TrainingPassage, raw: bool = raw) -> str:
            return passage.content.strip() if raw else render(passage)

        options: list[tuple[str, str]] = []
        own = by_id.get(pair.chunk_id)
        if own is not None and pair.kind != "title":
            path = own.heading_path.strip()
            others = [p for p in usable[own.document_id] if p.heading_path.strip() != path]
            while others:  # a seeded pick; one that may answer the anchor is put aside
                chosen = others.pop(_pick(seed, f"section:{pair.anchor}", len(others)))
                text = shown(chosen)
                if not answers(key, chosen, normalise(text), documents=False):
                    options.append(("section", text))
                    break
        for chunk_id in near_misses.get(key, ()):
            hit = by_id.get(chunk_id)
            if hit is None or len(_words(hit.content)) < MIN_PASSAGE_WORDS:
                continue
            text = shown(hit)
            if not answers(key, hit, normalise(text), documents=True):
                options.append(("near-miss", text))
                break
        if not options:
            dropped += 1
            continue
        kind, text = options[_pick(seed, f"negative:{pair.anchor}", len(options))]
        kept.append(dataclasses.replace(pair, negative=text, negative_kind=kind))
    return kept, dropped
