"""Answers are Markdown to the chat UIs that show them: nothing in one may load or run.

A page title, a source URI, a passage's text or a model's reply can carry Markdown (or the HTML
Markdown lets through) that a chat UI renders live: an image that loads from another site as
the answer is shown (a tracking pixel), a ``javascript:`` link, an ``<img>`` or ``<iframe>``
tag. What answers are made of goes through here:

- :func:`neutralise` on a model's reply (by the citation check) and on every answer a chat
  client receives: images become their alt text, links whose target is not ``http(s)://``
  become their text, reference definitions of such targets go, tags that load, link or run
  (``<img>``, ``<a>``, ``<iframe>``, ``<script>``, ...) go, and an autolink of another scheme
  loses its angle brackets. Code (fenced or inline) is left alone: a chat UI shows it as text.
- :func:`bracket_safe` on a title written inside a citation's brackets: a title's own ``[`` and
  ``]`` could close the citation and open a link or an image.
- :func:`escape` and :func:`link_target` on a title and a URI written as a Markdown link.
"""

from __future__ import annotations

import re
import urllib.parse

CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.DOTALL)
"""Fenced code blocks (an open one runs to the end) and inline code spans."""

_DESTINATION = r"\(\s*((?:[^()\n]|\([^()\n]*\))*)\)"
"""A link's ``(target "title")``, with one level of parentheses inside (``alert(1)``)."""
_TEXT = r"((?:[^\[\]\n]|\[[^\[\]\n]*\])*)"
"""A link's text, with one level of brackets inside."""
_IMAGE = re.compile(r"!\[" + _TEXT + r"\]" + _DESTINATION)
_LINK = re.compile(r"\[" + _TEXT + r"\]" + _DESTINATION)
_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*<?([^\s>]*)>?.*$", re.MULTILINE)
_TAG = re.compile(
    r"</?(?:img|image|svg|iframe|frame|frameset|object|embed|video|audio|source|picture|"
    r"track|script|style|link|meta|base|form|input|button|a|area|math)\b[^<>]*>?",
    re.IGNORECASE,
)
_AUTOLINK = re.compile(r"<([a-zA-Z][a-zA-Z0-9+.\-]{1,31}:[^<>\s]*)>")
_WEB = re.compile(r"<?\s*https?://", re.IGNORECASE)
_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def _web(target: str) -> bool:
    return bool(_WEB.match(target.strip()))


def _plain(text: str) -> str:
    text = _TAG.sub("", text)
    text = _IMAGE.sub(lambda m: m.group(1), text)
    text = text.replace("![", "[")  # a reference image, or one cut short
    text = _LINK.sub(lambda m: m.group(0) if _web(m.group(2)) else m.group(1), text)
    text = _DEFINITION.sub(lambda m: m.group(0) if _web(m.group(1)) else "", text)
    return _AUTOLINK.sub(lambda m: m.group(0) if _web(m.group(1)) else m.group(1), text)


def neutralise(text: str) -> str:
    """``text`` with nothing a Markdown renderer would load or run (the module says what goes);
    code spans and blocks as they are. Applying it twice changes nothing more."""
    pieces: list[str] = []
    position = 0
    for code in CODE.finditer(text):
        pieces.append(_plain(text[position : code.start()]))
        pieces.append(code.group(0))
        position = code.end()
    pieces.append(_plain(text[position:]))
    return "".join(pieces)


def bracket_safe(title: str) -> str:
    """``title`` to write between a citation's brackets: its own brackets as parentheses."""
    return title.replace("[", "(").replace("]", ")")


def escape(text: str) -> str:
    """``text`` with every character Markdown gives a meaning backslash-escaped, on one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(text.split()))


def link_target(uri: str) -> str:
    """``uri`` as a Markdown link's target: spaces, brackets, parentheses, quotes and angle
    brackets percent-encoded, so it cannot end the link or start another."""
    return urllib.parse.quote(uri, safe=":/?#@!$&*+,;=%~-._")
