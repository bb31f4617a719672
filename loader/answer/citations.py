"""Citation checking: a citation is a retrieved title in square brackets; a bracket naming
anything else is removed and reported; a reply that cites no retrieved title is "I don't know".
What the reply would make live in a Markdown renderer (images, links that are not http(s), tags
that load or run) is neutralised (:func:`loader.answer.markdown.neutralise`), and a title is
written into its citation with its own brackets as parentheses."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Sequence

from loader.answer.markdown import CODE, bracket_safe, neutralise
from loader.answer.passages import Passage
from loader.answer.prompt import IDK

_CODE = CODE
_BRACKET = re.compile(r"(?<![\w\]\[])\[([^\[\]\n]{1,400})\](?!\()")
_PREFIX = re.compile(r"^(?:sources?|titles?|see|cf\.?|citation)\s*[:\-]?\s*", re.IGNORECASE)


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    text = text.strip().strip("\"'\u201c\u201d*_ ").strip()
    text = _PREFIX.sub("", text)
    return re.sub(r"\s+", " ", text).casefold().rstrip(".")


_SECTION_NUMBER = re.compile(r"^(?:\d+|[a-z])(?:\.\d+)*\.\s+")
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)


def _title_keys(title: str) -> list[str]:
    """Ways a reply may write ``title``: as is, and without a leading section number."""
    key = _norm(title)
    short = _SECTION_NUMBER.sub("", key)
    return [key, short] if short and short != key else [key]


def is_idk(text: str | None) -> bool:
    """Is ``text`` the answer "I don't know" (apostrophes, case, trailing punctuation aside)?"""
    if text is None:
        return True
    norm = _norm(text).rstrip(".!").strip()
    return norm in ("i don't know", "i do not know", "")


@dataclasses.dataclass
class CheckedReply:
    answer: str
    abstained: bool
    cited_titles: list[str]
    """Retrieved titles the reply cites, in order of first citation."""
    removed_citations: list[str]
    """Bracketed names in the reply that are not retrieved titles (removed from the answer)."""
    note: str | None = None


def check_citations(reply: str | None, passages: Sequence[Passage]) -> CheckedReply:
    """Keep citations of retrieved titles, remove the rest, and treat uncited replies as IDK.

    A citation is ``[Title]`` (several may share one bracket, separated by ``;``); it may also
    name a passage's ``source_uri``. Brackets inside code (backticks) are left alone. Images,
    links to anything but http(s) and tags that load or run are neutralised.
    """
    if reply is not None:
        reply = _THINK.sub("", reply).strip()  # reasoning models' scratchpad is no answer
    if reply is None or is_idk(reply):
        return CheckedReply(IDK, True, [], [])
    by_key: dict[str, str] = {}
    for p in passages:
        by_key.setdefault(_norm(p.title), p.title)
        by_key.setdefault(_norm(p.source_uri), p.title)
    for p in passages:  # "[Index Types]" for "11.2. Index Types" (first title wins a tie)
        for key in _title_keys(p.title)[1:]:
            by_key.setdefault(key, p.title)
    by_key.pop("", None)

    cited: list[str] = []
    removed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        inner = match.group(1)
        parts = [s for s in re.split(r"\s*;\s*", inner) if s.strip()]
        if len(parts) > 1 and not all(_norm(s) in by_key for s in parts):
            parts = [inner]  # a title that itself contains ';'
        kept = []
        for part in parts:
            title = by_key.get(_norm(part))
            if title is None:
                removed.append(part.strip())
                continue
            kept.append(f"[{bracket_safe(title)}]")
            if title not in cited:
                cited.append(title)
        return " ".join(kept)

    pieces: list[str] = []
    position = 0
    for code in _CODE.finditer(reply):
        pieces.append(_BRACKET.sub(replace, reply[position : code.start()]))
        pieces.append(code.group(0))
        position = code.end()
    pieces.append(_BRACKET.sub(replace, reply[position:]))
    answer = neutralise("".join(pieces))
    answer = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", answer)).strip()

    if not cited:
        note = 'the reply cites no retrieved source, so it is treated as "I don\'t know"'
        return CheckedReply(IDK, True, [], removed, note)
    if is_idk(_BRACKET.sub("", answer)):  # "I don't know [Title]" is still "I don't know"
        return CheckedReply(IDK, True, [], removed)
    return CheckedReply(answer, False, cited, removed)


MAX_CITED_PASSAGES_PER_TITLE = 3


def cited_passages(passages: Sequence[Passage], titles: Sequence[str]) -> list[Passage]:
    """The passages of each cited title, in citation order: search hits by score, then chunks
    read in order, at most :data:`MAX_CITED_PASSAGES_PER_TITLE` per title (a citation points at
    evidence; it never carries a whole document)."""
    result: list[Passage] = []
    for title in titles:
        own = [p for p in passages if p.title == title]
        own.sort(key=lambda p: (p.score is None, -(p.score or 0.0)))
        result.extend(own[:MAX_CITED_PASSAGES_PER_TITLE])
    return result
