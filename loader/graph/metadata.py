"""Deterministic document metadata: outline, summary, type and key entities from the chunks.

Everything here reads only the document's title, source name and chunks (their text and heading
paths), so it is cheap, needs no model, and gives the same result for the same input. Work is
bounded for very long documents: the outline has at most :data:`MAX_TOC_ENTRIES` entries, and
the summary, type and entities read at most the first :data:`SCAN_CHUNKS` chunks.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Protocol

DOC_TYPES = ("policy", "manual", "technical_spec", "report", "reference", "general")
MAX_TOC_ENTRIES = 200
"""At most this many outline entries (the shallowest levels are kept first)."""
MAX_WINDOWS = 40
"""A document without headings gets at most this many chunk-window sections."""
SCAN_CHUNKS = 200
"""Summary, type and entities read at most this many chunks from the start of the document."""
SUMMARY_CHARS = 400
MAX_ENTITIES = 12


class ChunkLike(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def heading_path(self) -> str: ...
    @property
    def content(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class TocEntry:
    title: str
    level: int
    chunk_start: int
    chunk_end: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DocumentMetadata:
    summary: str
    doc_type: str
    key_entities: list[str]
    toc: list[TocEntry]
    origin: str = "heuristic"


# --- outline ------------------------------------------------------------------------------------

_NUMBERED = re.compile(r"^\s*((?:\d+\.)+\d*|\d+)\s+([A-Z][^\n]{1,100})$", re.M)


def _split_path(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split(" > ") if p) if path else ()


def outline(chunks: Sequence[ChunkLike], title: str = "") -> list[TocEntry]:
    """Outline entries (document order) with the chunk range each section covers.

    From the chunks' heading paths (below the part all chunks share, e.g. the parent page);
    else from numbered headings in the text (``3.2.1 Title``, the depth of the number is the
    level); else chunk windows titled by their first words. Never empty for a non-empty document.
    """
    if not chunks:
        return []
    paths = [_split_path(c.heading_path) for c in chunks]
    common = _common_prefix(paths)
    first: dict[tuple[str, ...], int] = {}
    last: dict[tuple[str, ...], int] = {}
    for chunk, path in zip(chunks, paths, strict=True):
        for depth in range(len(common) + 1, len(path) + 1):
            key = path[:depth]
            first.setdefault(key, chunk.index)
            last[key] = chunk.index
    entries = [
        TocEntry(key[-1], len(key) - len(common), first[key], last[key])
        for key in sorted(first, key=lambda k: (first[k], len(k)))
    ]
    if not entries:
        entries = _numbered(chunks)
    if not entries:
        entries = _windows(chunks, title)
    if len(entries) > MAX_TOC_ENTRIES:
        levels = sorted({e.level for e in entries})
        keep: list[TocEntry] = []
        for level in levels:
            candidate = [e for e in entries if e.level <= level]
            if len(candidate) > MAX_TOC_ENTRIES:
                break
            keep = candidate
        entries = keep or entries[:MAX_TOC_ENTRIES]
    return entries


def _common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    prefix = paths[0]
    for path in paths[1:]:
        n = 0
        while n < len(prefix) and n < len(path) and prefix[n] == path[n]:
            n += 1
        prefix = prefix[:n]
        if not prefix:
            break
    return prefix


def _numbered(chunks: Sequence[ChunkLike]) -> list[TocEntry]:
    found: list[tuple[str, int, int]] = []  # (title, level, chunk index)
    seen: set[str] = set()
    for chunk in chunks[: SCAN_CHUNKS * 10]:
        for match in _NUMBERED.finditer(chunk.content):
            number, heading = match.group(1).rstrip("."), match.group(2).strip()
            if number in seen or len(heading.split()) > 12 or heading.endswith((".", ",", ";")):
                continue
            seen.add(number)
            found.append((f"{number} {heading}", number.count(".") + 1, chunk.index))
    if len(found) < 2:
        return []
    last_index = chunks[-1].index
    entries: list[TocEntry] = []
    for i, (heading, level, start) in enumerate(found):
        end = last_index
        for _later, later_level, later_start in found[i + 1 :]:
            if later_level <= level:
                end = max(start, later_start - 1)
                break
        entries.append(TocEntry(heading, level, start, end))
    return entries


def _windows(chunks: Sequence[ChunkLike], title: str) -> list[TocEntry]:
    n = len(chunks)
    size = max(5, math.ceil(n / MAX_WINDOWS))
    entries = []
    for start in range(0, n, size):
        part = chunks[start : start + size]
        label = _first_words(part[0].content) or title or "Part"
        if start == 0 and title:
            label = title if n <= size else f"{title}: {label}"
        entries.append(TocEntry(label, 1, part[0].index, part[-1].index))
    return entries


def _first_words(text: str, words: int = 8) -> str:
    tokens = text.split()
    head = " ".join(tokens[:words])
    return head + (" ..." if len(tokens) > words else "")


# --- summary ------------------------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def summary(chunks: Sequence[ChunkLike], title: str = "", limit: int = SUMMARY_CHARS) -> str:
    """The lead sentences of the document (up to ``limit`` characters), title lines skipped."""
    sentences: list[str] = []
    length = 0
    for chunk in chunks[:SCAN_CHUNKS]:
        for paragraph in chunk.content.split("\n\n"):
            text = " ".join(paragraph.split())
            if not text or text == title or len(text) < 3:
                continue
            for sentence in _SENTENCE.split(text):
                sentence = sentence.strip()
                if not sentence or sentence in sentences:
                    continue
                if length and length + len(sentence) + 1 > limit:
                    return " ".join(sentences)
                sentences.append(sentence)
                length += len(sentence) + 1
                if length >= limit:
                    return _clip(" ".join(sentences), limit)
    result = " ".join(sentences)
    return _clip(result, limit) if result else title


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " ..."


# --- type ---------------------------------------------------------------------------------------

_TYPE_WORDS: dict[str, tuple[str, ...]] = {
    "policy": (
        "policy", "policies", "shall", "prohibited", "compliance", "employees", "must not",
        "violation", "approval", "code of conduct", "guidelines",
    ),
    "manual": (
        "manual", "guide", "tutorial", "chapter", "how to", "installation", "step",
        "getting started", "configure", "you can",
    ),
    "technical_spec": (
        "specification", "rfc", "protocol", "must", "should", "message format", "field",
        "conformance", "requirements", "interface", "wire",
    ),
    "report": (
        "report", "abstract", "results", "conclusion", "findings", "methods", "study",
        "we found", "participants", "analysis", "quarter",
    ),
    "reference": (
        "reference", "synopsis", "parameters", "description", "examples", "see also",
        "compatibility", "return value", "glossary", "appendix", "api",
    ),
}  # fmt: skip
_NAME_HINTS: dict[str, tuple[str, ...]] = {
    "policy": ("policy", "policies", "code-of-conduct", "terms"),
    "manual": ("manual", "guide", "tutorial", "howto", "handbook", "install"),
    "technical_spec": ("spec", "rfc", "protocol", "design"),
    "report": ("report", "paper", "study", "minutes", "review"),
    "reference": ("reference", "ref", "api", "sql-", "glossary", "appendix", "func"),
}


def doc_type(title: str, source: str, chunks: Sequence[ChunkLike]) -> str:
    """The most likely of :data:`DOC_TYPES` by file name, headings and vocabulary."""
    name = PurePath(source).name.lower()
    scores: Counter[str] = Counter()
    for kind, hints in _NAME_HINTS.items():
        if any(h in name for h in hints):
            scores[kind] += 3
    headings = " ".join(sorted({c.heading_path for c in chunks[:SCAN_CHUNKS]})).lower()
    body = " ".join(c.content for c in chunks[:20]).lower()
    text = f"{title.lower()} {headings}"
    for kind, words in _TYPE_WORDS.items():
        for word in words:
            pattern = re.compile(r"\b" + re.escape(word) + r"\b")
            scores[kind] += 2 * len(pattern.findall(text)) + min(3, len(pattern.findall(body)))
    if not scores:
        return "general"
    kind, best = max(sorted(scores.items()), key=lambda kv: kv[1])
    return kind if best >= 4 else "general"


# --- key entities -------------------------------------------------------------------------------

_IDENTIFIER = re.compile(
    r"\b(?:[a-z][a-z0-9]*_[a-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+|[A-Z][a-z]+[A-Z][A-Za-z0-9]*"
    r"|[A-Z]{2,}[0-9]*(?:_[A-Z0-9]+)*|[a-z_][a-z0-9_]*\(\))"
)
_NAME = re.compile(r"\b[A-Z][a-zA-Z0-9]+(?:[ -](?:of |for |and |the )?[A-Z][a-zA-Z0-9]+)+\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{3,}")
STOP_WORDS = frozenset(
    """a about above after again against all also an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having here how if in into is it its itself just may might more most
    must no nor not now of off on once only or other our out over own same shall should so
    some such than that the their them then there these they this those through to too under
    until up use used uses using very was we were what when where which while who whom why
    will with would you your yours one two new see also following example examples value
    values default set sets returns return type types name names note however within without
    each either first second last given based like make made many much need needs way ways
    well""".split()  # noqa: SIM905
)
_CAPS_STOP = frozenset(
    {"NULL", "TRUE", "FALSE", "AND", "OR", "NOT", "THE", "SQL", "NOTE", "IF", "IN", "ON", "TO"}
)


def key_entities(title: str, chunks: Sequence[ChunkLike], limit: int = MAX_ENTITIES) -> list[str]:
    """Identifiers, capitalised multi-word names and frequent distinctive words, best first."""
    text = "\n".join(c.content for c in chunks[:SCAN_CHUNKS])
    found: Counter[str] = Counter()
    for match in _IDENTIFIER.findall(text):
        if match not in _CAPS_STOP and len(match) >= 3:
            found[match] += 2
    for match in _NAME.findall(text):
        words = match.split()
        if len(words) <= 5 and not all(w.lower() in STOP_WORDS for w in words):
            found[match] += 2
    words = Counter(
        w.lower() for w in _WORD.findall(text) if w.lower() not in STOP_WORDS and not w.isdigit()
    )
    for word, count in words.most_common(limit):
        if count >= 3:
            found[word] += count // 3
    title_lower = title.lower()
    ranked = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
    result: list[str] = []
    seen: set[str] = set()
    for entity, _count in ranked:
        key = entity.lower()
        if key in seen or key in title_lower:  # the title itself, or a word of it
            continue
        seen.add(key)
        result.append(entity)
        if len(result) >= limit:
            break
    return result


def deterministic(title: str, source: str, chunks: Sequence[ChunkLike]) -> DocumentMetadata:
    """The metadata of a document without a model."""
    return DocumentMetadata(
        summary=summary(chunks, title) or title,
        doc_type=doc_type(title, source, chunks),
        key_entities=key_entities(title, chunks),
        toc=outline(chunks, title),
    )
