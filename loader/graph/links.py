"""Deterministic edges: hyperlinks and explicit mentions between documents.

Links come from the extractor (``Extracted.links``: HTML ``<a href>`` outside navigation and
tables of contents, Markdown links) and are resolved here against the linking document's
``source_uri``: relative paths against its folder, fragments and queries dropped, links to
itself and to other sites (``http:``, ``mailto:``, ...) ignored. Every resolved link is kept in
``kb.document_links``; the ones whose target is an ingested document are ``references`` edges
(origin ``link``), and a link to a document ingested later becomes an edge when it arrives.

Mentions: a document that names another document's file name (``sql-createindex.html``) or its
full, distinctive title (at least :data:`MIN_TITLE_WORDS` words and :data:`MIN_TITLE_CHARS`
characters, held by no other document) gets a ``references`` edge with origin ``mention`` and
the sentence as evidence.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

MIN_TITLE_WORDS = 3
MIN_TITLE_CHARS = 15
MAX_LINKS = 2000
"""At most this many distinct link targets are kept per document."""
MAX_EVIDENCE = 200
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


@dataclasses.dataclass(frozen=True)
class Link:
    target_uri: str
    href: str
    anchor: str


def _is_url(uri: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", uri))


def resolve(source_uri: str, href: str) -> str | None:
    """The source_uri ``href`` points to, seen from ``source_uri``; None when it is not a
    document link (empty, a fragment of the same page, another scheme, or the page itself)."""
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    if _is_url(source_uri):
        target = urljoin(source_uri, href)
        parts = urlsplit(target)
        target = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        return None if target == source_uri or not parts.path else target
    if _SCHEME.match(href):
        if not href.lower().startswith("file:"):
            return None  # http:, mailto:, javascript:, ... : not a file of this knowledge base
        path = unquote(urlsplit(href).path)
    else:
        path = unquote(href.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return None
    if not posixpath.isabs(path):
        path = posixpath.join(posixpath.dirname(source_uri), path)
    target = posixpath.normpath(path)
    return None if target == source_uri else target


def resolve_links(source_uri: str, links: Iterable[tuple[str, str]]) -> list[Link]:
    """Distinct link targets in first-seen order, each with the first non-empty anchor text."""
    found: dict[str, Link] = {}
    for href, anchor in links:
        target = resolve(source_uri, href)
        if target is None:
            continue
        anchor = anchor[:MAX_EVIDENCE]
        known = found.get(target)
        if known is None:
            if len(found) >= MAX_LINKS:
                continue
            found[target] = Link(target, href[:1000], anchor)
        elif not known.anchor and anchor:
            found[target] = Link(target, known.href, anchor)
    return list(found.values())


# --- mentions -----------------------------------------------------------------------------------

_WORDS = re.compile(r"[\w.:/-]+")
_FILE_NAME = re.compile(r"[\w.-]+\.(?:html?|xhtml|md|markdown|txt|text|rst|pdf)\b", re.I)


def _norm(word: str) -> str:
    return word.strip(".,;:()[]\"'").lower()


@dataclasses.dataclass
class MentionIndex:
    """The documents a text may mention: by distinctive title and by unique file name."""

    by_first_word: dict[str, list[tuple[tuple[str, ...], str]]] = dataclasses.field(
        default_factory=dict
    )
    by_file_name: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def build(cls, documents: Iterable[tuple[str, str, str]]) -> MentionIndex:
        """From ``(document id, title, source_uri)`` rows."""
        titles: dict[tuple[str, ...], list[str]] = {}
        names: dict[str, list[str]] = {}
        for doc_id, title, source in documents:
            words = tuple(_norm(w) for w in title.split() if _norm(w))
            if len(words) >= MIN_TITLE_WORDS and len(title) >= MIN_TITLE_CHARS:
                titles.setdefault(words, []).append(doc_id)
            name = PurePath(source).name.lower()
            if _FILE_NAME.fullmatch(name):
                names.setdefault(name, []).append(doc_id)
        index = cls()
        for words, ids in titles.items():
            if len(ids) == 1:
                index.by_first_word.setdefault(words[0], []).append((words, ids[0]))
        index.by_file_name = {name: ids[0] for name, ids in names.items() if len(ids) == 1}
        return index

    def find(self, document_id: str, texts: Sequence[str]) -> dict[str, str]:
        """``{mentioned document id: evidence sentence}`` for the texts of ``document_id``."""
        found: dict[str, str] = {}
        for text in texts:
            for match in _FILE_NAME.finditer(text):
                target = self.by_file_name.get(match.group(0).lower())
                if target and target != document_id and target not in found:
                    found[target] = _sentence(text, match.start(), match.end())
            if not self.by_first_word:
                continue
            words = list(_WORDS.finditer(text))
            normed = [_norm(w.group(0)) for w in words]
            for i, word in enumerate(normed):
                for title_words, target in self.by_first_word.get(word, ()):
                    if target == document_id or target in found:
                        continue
                    n = len(title_words)
                    if tuple(normed[i : i + n]) == title_words:
                        found[target] = _sentence(text, words[i].start(), words[i + n - 1].end())
        return found


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence around ``text[start:end]``, at most MAX_EVIDENCE characters."""
    left = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    right_candidates = [p for p in (text.find(". ", end - 1), text.find("\n", end)) if p >= 0]
    right = min(right_candidates) + 1 if right_candidates else len(text)
    sentence = " ".join(text[left + 1 : right].split())
    if len(sentence) > MAX_EVIDENCE:
        middle = " ".join(text[start:end].split())
        sentence = middle if len(middle) >= MAX_EVIDENCE - 20 else _around(text, start, end)
    return sentence[:MAX_EVIDENCE]


def _around(text: str, start: int, end: int) -> str:
    room = max(0, (MAX_EVIDENCE - (end - start)) // 2 - 4)
    return "... " + " ".join(text[max(0, start - room) : end + room].split()) + " ..."
