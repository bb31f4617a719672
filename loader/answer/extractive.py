"""Extractive answers: the best passages themselves, each with its title and source, for when
no chat model is configured or the model fails."""

from __future__ import annotations

import re
from collections.abc import Sequence

from loader.answer.markdown import bracket_safe
from loader.answer.passages import Passage

_STOP_WORDS = (
    "a an and are as at be by can do does for from how "
    "i if in into is it its my of on or our should so "
    "than that the their them then there these they this to was we what "
    "when where which who why will with without would you your about after before "
    "between more most other some such use used using want need does did has "
    "have"
)
_STOP = frozenset(_STOP_WORDS.split())


def _terms(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9_]+", text.casefold())
    return {w[:6] for w in words if len(w) > 2 and w not in _STOP}


def best_excerpt(question: str, content: str, max_chars: int = 600) -> str:
    """The run of up to three sentences of ``content`` that shares most terms with the question."""
    text = re.sub(r"\s+", " ", content).strip()
    if len(text) <= max_chars:
        return text
    sentences = [s for s in re.split(r"(?<=[.!?:])\s+", text) if s]
    wanted = _terms(question)
    best: tuple[int, int] = (-1, 0)
    for start in range(len(sentences)):
        window = " ".join(sentences[start : start + 3])
        score = len(wanted & _terms(window))
        if score > best[0]:
            best = (score, start)
    window = " ".join(sentences[best[1] : best[1] + 3])
    if len(window) > max_chars:
        window = window[:max_chars].rsplit(" ", 1)[0] + " ..."
    prefix = "... " if best[1] > 0 else ""
    return prefix + window


def extractive_answer(question: str, passages: Sequence[Passage], max_passages: int = 3) -> str:
    """The best passages themselves, each with its title and source, as the answer text."""
    blocks = []
    for passage in passages[:max_passages]:
        title = bracket_safe(passage.title)  # its own "]" would end the bracket
        excerpt = best_excerpt(question, passage.content)
        blocks.append(f"[{title}] ({passage.source_uri})\n  {excerpt}")
    return "\n\n".join(blocks)
