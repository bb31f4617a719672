"""Does the best passage speak of what the question is about? The ``focus_coverage`` signal.

A question's focus is its rarest content words in general English ("Do we have a company
*choir*?", "Is there a *bike* to work *scheme*?"): :func:`focus_words` takes the question's
content words (those with a lexeme: stop words have none), drops contractions and words of
fewer than three letters, and keeps the :data:`FOCUS_WORDS` rarest by :func:`general_rank`
(the position of the word in the local model's WordPiece vocabulary, which lists whole words
roughly by frequency; a word it lacks counts as rarest). Rarity in English, not in the corpus:
the focus is the same whatever the corpus, and a word the corpus never uses is still a focus word.

:func:`focus_coverage` then asks, for each focus word, whether the top :data:`TOP_PASSAGES`
passages hold it: 1.0 when one of them holds one of its lexemes (the corpus's own words), else
the best cosine similarity between the word alone and a word of those passages (the embedding
model embeds single words; "bike" meets "cycle", "teeth" meets "dental", "wine" meets "drink").
The signal is the mean over the focus words, weighted by rarity (``log(2 + rank)``): near 1 when
the passages speak of the question's subject, lower when its subject is absent from them.

The cost is bounded: nothing is embedded when every focus word is held lexically; otherwise one
batch of at most ``FOCUS_WORDS + MAX_PASSAGE_WORDS`` single words (the passages' rarest distinct
words), on top of the query's own embedding.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from loader.answer.abstention.words import vocabulary

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]

FOCUS_WORDS = 3
"""How many of the question's rarest content words make its focus."""
TOP_PASSAGES = 3
"""How many of the best hits are read for the focus words."""
MAX_PASSAGE_WORDS = 96
"""The passages' rarest distinct words compared with an absent focus word (bounds the cost)."""
COMMON_RANK = 150
"""Passage words among the most common this many English words (the, which, also) are skipped."""
UNKNOWN_RANK = 30000
"""The rank of a word the vocabulary lacks (rarer than any word it has)."""

_CONTRACTION = re.compile(r"['\u2019](?:m|ve|d|ll|re|t|s)$|n['\u2019]?t$", re.IGNORECASE)
_PASSAGE_WORD = re.compile(r"[a-z][a-z-]*[a-z]")
_QUESTION_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*")


def question_words(text: str) -> list[str]:
    """The words of a question, as :func:`focus_words` reads them (letters first; digits,
    apostrophes and hyphens inside)."""
    return _QUESTION_WORD.findall(text)


@functools.lru_cache(maxsize=1)
def _ranks() -> dict[str, int]:
    """Each word of the model's vocabulary (:func:`.words.vocabulary`, two letters or more, ASCII)
    with its frequency rank (0: the most common)."""
    ranks: dict[str, int] = {}
    for word in vocabulary():
        if word.isascii() and len(word) > 1:
            ranks.setdefault(word, len(ranks))
    return ranks


def general_rank(word: str) -> int:
    """How rare ``word`` is in general English: its frequency rank in the model's vocabulary
    (0 the commonest), :data:`UNKNOWN_RANK` when the vocabulary lacks it or is not installed."""
    return _ranks().get(word.lower(), UNKNOWN_RANK)


def focus_words(words: Sequence[str], lexemes: Mapping[str, Sequence[str]]) -> list[str]:
    """The question's focus: its :data:`FOCUS_WORDS` rarest content words (lower case).

    ``words`` are the question's words in order; ``lexemes`` maps a word to its lexemes
    (``kb.word_lexemes``): a word without lexemes is a stop word. Contractions (I'm, won't) and
    words of fewer than three letters are never the focus."""
    content: list[str] = []
    for word in words:
        lower = word.lower()
        if (
            len(lower) < 3
            or not lexemes.get(word)
            or _CONTRACTION.search(lower)
            or not any(ch.isalpha() for ch in lower)
        ):
            continue
        if lower not in content:
            content.append(lower)
    return sorted(content, key=lambda w: -general_rank(w))[:FOCUS_WORDS]


def passage_words(texts: Sequence[str], limit: int = MAX_PASSAGE_WORDS) -> list[str]:
    """The distinct words of ``texts`` (lower case, three letters or more) but the commonest,
    rarest first, at most ``limit``."""
    found = {
        w
        for text in texts
        for w in _PASSAGE_WORD.findall(text.lower())
        if general_rank(w) >= COMMON_RANK
    }
    return sorted(found, key=lambda w: (-general_rank(w), w))[:limit]


def _weight(word: str) -> float:
    return math.log(2 + general_rank(word))


def focus_coverage(
    focus: Sequence[str],
    held: Mapping[str, bool],
    texts: Sequence[str],
    embed: Embed | None,
) -> float | None:
    """The rarity-weighted mean, over the ``focus`` words, of 1.0 for a word the passages hold
    (``held``: lexically, by its lexemes) else its best cosine similarity to a word of the
    passage ``texts`` (``embed`` embeds the words). None without focus words, or when a word is
    not held and there is no ``embed`` or no passage word to compare it with."""
    if not focus:
        return None
    missing = [w for w in focus if not held.get(w)]
    best: dict[str, float] = {w: 1.0 for w in focus if held.get(w)}
    if missing:
        candidates = passage_words(texts)
        if embed is None or not candidates:
            return None
        vectors = np.asarray(embed([*missing, *candidates]), dtype=np.float64)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        similarity = vectors[: len(missing)] @ vectors[len(missing) :].T
        for i, word in enumerate(missing):
            best[word] = float(similarity[i].max())
    total = sum(_weight(w) for w in focus)
    return sum(_weight(w) * best[w] for w in focus) / total
