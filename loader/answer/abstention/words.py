"""Word heuristics of the abstention gate: which words of a question look like names.

Pure text, no database: the question's words (:func:`words`), the runs of name-like words that
make one name (:func:`name_runs`), plain words that are neither common English nor spelt like it
(:func:`rare_words`), abbreviations the question defines itself (:func:`defined_abbreviations`),
numbers and quantities that are never names (:func:`is_quantity`), and the edit distance used to
take a word for a misspelling (:func:`edit_distance`). :mod:`.signals` checks these against the
corpus.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from loader import resources

_WORD = re.compile(r"[^\W_][\w.$+/-]*(?:[^\W_]|\+)|[^\W_]")
"""A word: letters of any script (Greek ones in gene names too) and digits, with _ . $ + / -
inside."""


# Numbers, times, dates and quantities are not names, whatever their letters: 2pm, 14:30, 3rd,
# 1990s, 64kB, 10GB, 5ms, 2x, 400mg, 2024-05-01, v15, rates (100MB/s, 40mg/day, 5mmol/L), and a
# number joined to a plain lower-case word (64-bit, 3-dimensional, 2-phase).
_UNIT = (
    r"(?:am|pm|st|nd|rd|th|s|ms|us|min|mins|h|hr|hrs|d|k|kb|mb|gb|tb|pb|x|%"
    r"|mg|g|kg|ug|ml|l|mm|cm|m|km|nm|hz|khz|mhz|ghz|mol|mmol)"
)
_PER_UNIT = r"(?:s|sec|min|h|hr|hour|d|day|wk|week|month|yr|year|l|ml|dl|kg|g|m|km|m2)"
_QUANTITY = re.compile(
    rf"v?\d+(?:[.,:]\d+)*{_UNIT}?(?:/{_PER_UNIT})?"
    r"|\d{4}-\d{2}(?:-\d{2})?",
    re.IGNORECASE,
)
_NUMBERED_WORD = re.compile(r"\d+(?:\.\d+)?-[a-z]{2,}(?:-[a-z]{2,})*")


def is_quantity(word: str) -> bool:
    """Is ``word`` a number, time, date or quantity (2pm, 14:30, 64kB, 2024-05-01, 40mg/day,
    64-bit)?"""
    return _QUANTITY.fullmatch(word) is not None or _NUMBERED_WORD.fullmatch(word) is not None


def is_identifier(word: str) -> bool:
    """A code or identifier (40P01, pg_dump, work_mem): checked on its own, as the keyword leg
    matches it, even inside a longer name ("SQLSTATE 40P01")."""
    return any(ch.isdigit() for ch in word) or "_" in word


@dataclasses.dataclass(frozen=True)
class Word:
    text: str
    named: bool
    joined: bool
    """True when only whitespace separates it from the previous word (no punctuation)."""


def words(query_text: str) -> list[Word]:
    """The question's words, each marked when it looks like a name or an identifier.

    A word looks like a name when it has a digit, an underscore, a dot or slash inside, a
    capital letter after its first letter (MySQL, VACUUM), or a leading capital when it does not
    start a sentence (Patroni). In a title-case question (most words capitalised) a leading
    capital says nothing and is ignored.
    """
    raw_words = list(re.finditer(r"\S+", query_text))
    alpha = [m.group(0) for m in raw_words if any(ch.isalpha() for ch in m.group(0))]
    capitalised = sum(1 for w in alpha if w.lstrip("\"'(")[:1].isupper())
    title_case = len(alpha) >= 3 and capitalised / len(alpha) >= 0.6
    out: list[Word] = []
    sentence_start = True
    previous_clean = False
    for match in raw_words:
        raw = match.group(0)
        found = _WORD.search(raw)
        if found is None:
            sentence_start = raw.endswith((".", "?", "!", ":"))
            previous_clean = False
            continue
        word = _name_part(found.group(0))
        inner = word[1:]
        named = (
            any(ch.isdigit() for ch in word)
            or "_" in word
            or "." in word.strip(".")
            or "/" in word
            or (any(ch.isupper() for ch in inner) and not (title_case and inner.isupper()))
            or (word[0].isupper() and not sentence_start and not title_case)
        )
        named = (
            named and len(word) > 1 and any(ch.isalpha() for ch in word) and not is_quantity(word)
        )
        joined = previous_clean and found.start() == 0
        out.append(Word(word, named, joined))
        previous_clean = found.end() == len(raw)
        sentence_start = raw.endswith((".", "?", "!", ":"))
    return out


def _name_part(word: str) -> str:
    """``word`` without what only qualifies the name in it: a trailing + (TRAP+ cells, CD8+)
    and the common lower-case words of a hyphenated compound (RecQ-class, Africa-trained,
    iPSC-derived: RecQ, Africa, iPSC)."""
    word = word.rstrip("+") or word
    if "-" not in word:
        return word
    parts = word.split("-")
    vocabulary = common_words()
    kept = [p for p in parts if not (p.isalpha() and p.islower() and is_common(p, vocabulary))]
    return "-".join(kept) if kept and any(ch.isalpha() for ch in "".join(kept)) else word


def name_like_words(query_text: str) -> list[str]:
    """Words of the question that look like names or identifiers (not plain English words)."""
    return [w.text for w in words(query_text) if w.named]


def name_runs(query_text: str) -> list[str]:
    """Names in the question: runs of adjacent name-like words ("ALTER SYSTEM", "Data Guard")."""
    runs: list[list[str]] = []
    previous_named = False
    for word in words(query_text):
        if word.named and previous_named and word.joined:
            runs[-1].append(word.text)
        elif word.named:
            runs.append([word.text])
        previous_named = word.named
    return [" ".join(run) for run in runs]


@functools.lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """The whole lower-case words of BERT's uncased WordPiece vocabulary (the one
    all-MiniLM-L6-v2 reads), in its order (roughly by frequency, the commonest first), as
    ``loader/data/english_words.txt`` ships them: the same whatever model is installed."""
    lines = resources.english_words_file().read_text(encoding="utf-8").splitlines()
    return tuple(w for w in lines if w.isalpha() and w.islower())


@functools.lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """Common English words: the whole-word entries of the local model's WordPiece vocabulary.

    A word outside it that the corpus never uses (crosstab, hstore, unaccent) is as telling as
    a product name. Empty (the test is skipped) when the vocabulary file is not installed.
    """
    return frozenset(vocabulary())


_SUFFIXES = ("est", "er", "ly", "ness", "ing", "ed", "es", "s")


def is_common(word: str, vocabulary: frozenset[str]) -> bool:
    """Is ``word`` (lower case) a common English word, an inflection of one (gentlest, quickest,
    happier: the base is in ``vocabulary``), or two joined (leaderboard = leader + board)?"""
    if word in vocabulary:
        return True
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            bases = {base, base + "e"}
            if base.endswith("i"):
                bases.add(base[:-1] + "y")
            if len(base) >= 4 and base[-1] == base[-2]:
                bases.add(base[:-1])
            if bases & vocabulary:
                return True
    return any(word[:i] in vocabulary and word[i:] in vocabulary for i in range(3, len(word) - 2))


MIN_TRIGRAM_WORDS = 3
"""A letter trigram found in fewer common English words than this is not English spelling."""


@functools.lru_cache(maxsize=1)
def _padded_words() -> tuple[str, ...]:
    """The common English words (:func:`common_words`), with ``^`` and ``$`` marking the start
    and end of each."""
    return tuple(f"^{word}$" for word in common_words())


@functools.lru_cache(maxsize=8192)
def _words_with(trigram: str) -> int:
    """How many common English words hold the letter ``trigram`` ("^ad", "ia$"), counted up to
    :data:`MIN_TRIGRAM_WORDS` (all that is asked; counted per trigram asked, not for every
    trigram at once, which took a quarter of a second of every ``pgkb ask``)."""
    count = 0
    for word in _padded_words():
        if trigram in word:
            count += 1
            if count >= MIN_TRIGRAM_WORDS:
                break
    return count


def spelt_like_english(word: str) -> bool:
    """Does ``word`` (letters only) read like an English word, common or not?

    Every letter trigram of it, start and end included, occurs in at least
    :data:`MIN_TRIGRAM_WORDS` common English words. Words the vocabulary lacks but English
    spelling makes (adventitia, hindrance, unassociated, perigenital) pass; coined software names
    (pgvector, etcd, hstore, mongodb, kafka) have a trigram no English word has (``^pg``, ``cd$``,
    ``^hs``, ``db$``, ``fka``) and do not.
    """
    padded = f"^{word.lower()}$"
    return all(_words_with(padded[i : i + 3]) >= MIN_TRIGRAM_WORDS for i in range(len(padded) - 2))


def rare_words(query_text: str) -> list[str]:
    """Plain (not name-like) words of the question that are neither common English words nor
    spelt like English: coined names written in lower case (hstore, pgvector).

    A plain word spelt like English but missing from the vocabulary (adventitia, hindrance) is
    an ordinary word of some field, not a name: a question may use it whether or not the corpus
    does.
    """
    vocabulary = common_words()
    if not vocabulary:
        return []
    rare = []
    for word in words(query_text):
        if word.named:
            continue
        parts = [p for p in re.split(r"[-+/.$]", word.text.lower()) if p]
        if any(
            len(p) >= 3
            and p.isalpha()
            and not is_common(p, vocabulary)
            and not spelt_like_english(p)
            for p in parts
        ):
            rare.append(word.text)
    return rare


def defined_abbreviations(query_text: str) -> dict[str, str]:
    """Abbreviations the question defines itself, each with its long form: "weighed food
    records (WFR)", "dengue virus (DENV-1)", "vitamin B6 (VB6)".

    A parenthesised word is defined when its letters can be found, right to left, in the few
    words before it, its first letter starting a word (Schwartz and Hearst's rule, 2003); the
    long form runs from that word to the parenthesis. Such a word names what its long form says:
    it is not a name the corpus must contain, and a long form the corpus knows only by its
    abbreviation ("Vaccine Alliance (GAVI)") is known when the abbreviation is.
    """
    defined: dict[str, str] = {}
    for match in re.finditer(r"\(\s*([^()\s]{2,15})\s*\)", query_text):
        short = match.group(1).strip(".,;:")
        chars = [ch.lower() for ch in short if ch.isalpha()]
        if len(chars) < 2:
            continue
        before = re.findall(r"\S+", query_text[: match.start()])
        window = " ".join(before[-min(len(chars) + 5, 2 * len(chars)) :])
        start = _long_form_start(chars, window.lower())
        if start >= 0:
            defined[short] = window[start:]
    return defined


def _long_form_start(chars: list[str], text: str) -> int:
    """Where the long form of an abbreviation with letters ``chars`` starts at the end of
    ``text`` (-1: none)."""
    position = len(text) - 1
    for index in range(len(chars) - 1, -1, -1):
        char = chars[index]
        while position >= 0 and (
            text[position] != char or (index == 0 and position > 0 and text[position - 1].isalnum())
        ):
            position -= 1
        if position < 0:
            return -1
        position -= 1
    return position + 1


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
    adjacent letters each cost 1."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]
