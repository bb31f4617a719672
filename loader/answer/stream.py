"""A model's reply streamed to a client only as far as the citation check lets it through.

:func:`loader.answer.citations.check_citations` decides on the whole reply: brackets naming
anything but a retrieved title are removed, and a reply that cites nothing is "I don't know".
A client that streams (a chat UI, ``/v1/ask`` with ``stream``) must never see text the check
would refuse, so :class:`CheckedStream` checks the reply so far each time a piece arrives and
passes on only what is settled:

- nothing until the reply cites a retrieved title (before that, it may still become "I don't
  know");
- then the checked text up to the last whitespace outside an open bracket, link target
  (``[x](url "title"``), tag (``<img src=...``), inline code span, code block or ``<think>``
  block (a bracket is decided by what follows it: ``[x](url)`` is a link, not a citation; a
  link or a tag is neutralised by the check only once whole).

At the end :meth:`CheckedStream.finish` sends the rest of the final checked answer. What was
sent is always a prefix of the checked answer in practice; if the final check ever disagreed
with what was sent, the checked answer follows under a ``Checked answer:`` line, so the last
word the client reads is the checked one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from loader.answer.citations import check_citations
from loader.answer.passages import Passage

CORRECTION = "\n\n---\nChecked answer:\n\n"


def safe_cut(text: str) -> int:
    """The length of the longest prefix of ``text`` that ends at whitespace outside any open
    bracket, link target, tag, inline code, fenced code or ``<think>`` block (0 when there is
    none). Cutting at whitespace can open one again (``[x](url "a title")`` cut inside its
    title), so the prefix is trimmed until it ends outside all of them."""
    while True:
        text = _closed_prefix(text)
        match = re.search(r"\s(?=\S*\Z)", text)
        cut = match.start() if match else 0
        if cut == 0 or _closed_prefix(text[:cut]) == text[:cut]:
            return cut
        text = text[:cut]


def _closed_prefix(text: str) -> str:
    """``text`` up to the start of the last construct it leaves open."""
    fences = [m.start() for m in re.finditer(r"```", text)]
    if len(fences) % 2:
        text = text[: fences[-1]]
    lowered = text.lower()
    think = lowered.rfind("<think>")
    if think >= 0 and lowered.find("</think>", think) < 0:
        text = text[:think]
    # an inline code span still open on the last line (spans do not cross lines)
    line_start = text.rfind("\n") + 1
    if text[line_start:].count("`") % 2:
        text = text[: line_start + text[line_start:].rfind("`")]
    opened, closed = text.rfind("["), text.rfind("]")
    if opened > closed:
        text = text[:opened]
    # a link's or an image's target still open: "[text](target" (with a title, it holds
    # whitespace), decided by the check only once closed
    target = text.rfind("](")
    if target >= 0 and _depth(text[target + 1 :]) > 0:
        text = text[: text.rfind("[", 0, target) if "[" in text[:target] else target]
        opened, closed = text.rfind("["), text.rfind("]")
        if opened > closed:
            text = text[:opened]
    # a tag still open ("<img src=... "), which the check removes only once it is whole
    tag = _OPEN_TAG.search(text)
    if tag is not None:
        text = text[: tag.start()]
    return text


_OPEN_TAG = re.compile(r"</?[A-Za-z][^<>]*\Z")


def _depth(text: str) -> int:
    """How many parentheses of ``text`` are still open at its end."""
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
    return depth


class CheckedStream:
    """Feed it the reply's pieces as they arrive; it calls ``emit`` with the checked text."""

    def __init__(self, context: Sequence[Passage], emit: Callable[[str], None]) -> None:
        self.context = list(context)
        self.emit = emit
        self.raw = ""
        self.sent = ""
        self._checked_to = 0

    def feed(self, piece: str) -> None:
        self.raw += piece
        cut = safe_cut(self.raw)
        if cut <= self._checked_to:
            return
        self._checked_to = cut
        checked = check_citations(self.raw[:cut], self.context)
        if checked.abstained:
            return  # nothing cited yet: the reply may still be "I don't know"
        self._send(checked.answer)

    def _send(self, text: str) -> None:
        if len(text) > len(self.sent) and text.startswith(self.sent):
            self.emit(text[len(self.sent) :])
            self.sent = text

    def finish(self, final: str) -> None:
        """Send what the final checked answer adds to what was sent (all of it when nothing
        was), or the checked answer under a correction line when they disagree."""
        if final.startswith(self.sent):
            self._send(final)
        else:
            self.emit(CORRECTION + final)
            self.sent = final
