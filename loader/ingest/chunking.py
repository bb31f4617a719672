"""Chunking in tokens of the embedding model's own tokenizer.

Each section (the text under one heading path) is split by semchunk
(https://github.com/isaacus-dev/semchunk) at the most meaningful boundary that fits: runs of
newlines (paragraphs) first, then sentence ends, clause separators, and words last; an optional
overlap (in tokens) repeats the end of a chunk at the start of the next. Sections are never
merged, so a chunk never straddles two headings and always knows its heading path.

What the model reads (the *embedded text*) is the chunk prefixed with its context: the heading
path, preceded by the document title unless the path already names it (``embed_heading_path``;
off: the chunk alone). Prefix and chunk together stay within ``chunk_tokens``: the chunk gets
what the prefix leaves. ``content_sha`` is the sha256 of exactly the embedded text, so two
chunks with the same ``content_sha`` have the same vector, and an unchanged chunk reuses its
stored embedding.

The stored heading path (``kb.chunks.heading_path``, which the keyword leg indexes at weight A)
is the same context in full: the document title, unless the path already names it, then the
section's headings. So a title's words are searchable even where the document has no headings
(a BEIR abstract, a Markdown file without a first-level heading).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from semchunk.semchunk import chunk as semchunk_chunk

from loader.ingest.extract import EXTRACTOR_VERSION, Section
from loader.providers.embeddings import Embedder, chunk_size, reserved_tokens
from loader.settings import Settings

MIN_BODY_TOKENS = 16
"""A chunk's own text keeps at least this many tokens; a longer heading prefix is shortened."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    index: int
    heading_path: str
    content: str
    """The chunk's text as stored and shown (without the prefix)."""
    embed_text: str
    """Exactly what the embedding model reads (prefix + content)."""
    content_sha: str
    """sha256 (hex) of ``embed_text``."""
    token_count: int
    """Tokens of ``content`` in the model's tokenizer."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def titled_path(title: str, path: tuple[str, ...]) -> tuple[str, ...]:
    """``path`` led by the document title unless it already names it (a PDF's "Page 3", a
    Markdown file without a first-level heading, a BEIR abstract)."""
    return (title, *path) if title and title not in path else path


class Chunker:
    """Splits a document's sections into :class:`Chunk` s sized for ``embedder``."""

    def __init__(
        self,
        embedder: Embedder,
        chunk_tokens: int,
        chunk_overlap: int = 0,
        *,
        embed_heading_path: bool = True,
    ) -> None:
        self.embedder = embedder
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.embed_heading_path = embed_heading_path
        self._count = embedder.count_tokens

    @classmethod
    def from_settings(cls, settings: Settings, embedder: Embedder) -> Chunker:
        """A chunker for ``settings``, its chunk size driven by the model's input limit
        (:func:`~loader.providers.embeddings.chunk_size`); :class:`ConfigError` if chunks
        would not fit the model."""
        return cls(
            embedder,
            chunk_size(settings, embedder),
            settings.chunk_overlap,
            embed_heading_path=settings.embed_heading_path,
        )

    FORMAT = 2
    """Bumped when the stored form of chunks changes (2: the title leads the heading path)."""

    def fingerprint(self) -> str:
        """What, besides the source bytes, decides the chunks: a change re-chunks everything."""
        return (
            f"extract={EXTRACTOR_VERSION};chunks={self.FORMAT};chunker=semchunk;tokens={self.chunk_tokens};overlap={self.chunk_overlap};"
            f"prefix={int(self.embed_heading_path)};model={self.embedder.name}"
        )

    def embed_text(self, title: str, path: tuple[str, ...], content: str) -> str:
        """The text the model reads for ``content`` under ``path`` of a document titled
        ``title``: the prefix :meth:`chunk` gives it, then the content."""
        prefix = self._prefix(titled_path(title, path))
        return f"{prefix}\n\n{content}" if prefix else content

    def _prefix(self, path: tuple[str, ...]) -> str:
        """What the model reads before a chunk: ``path`` (title first), shortened to fit."""
        if not self.embed_heading_path:
            return ""
        parts = list(path)
        budget = max(0, self.chunk_tokens - MIN_BODY_TOKENS)
        while len(parts) > 1 and self._count(" > ".join(parts)) + 2 > budget:
            parts.pop(0)  # keep the innermost headings
        prefix = " > ".join(parts)
        if prefix and self._count(prefix) + 2 > budget:
            words = prefix.split()
            while words and self._count(" ".join(words)) + 2 > budget:
                words.pop()
            prefix = " ".join(words)
        return prefix

    def split(self, text: str, size: int) -> list[str]:
        """``text`` in pieces of at most ``size`` tokens (semchunk, with the overlap)."""
        overlap = min(self.chunk_overlap, size // 2) or None
        pieces = semchunk_chunk(
            text, size, self._count, memoize=True, cache_maxsize=65536, overlap=overlap
        )
        assert isinstance(pieces, list)
        return [p.strip() for p in pieces if isinstance(p, str) and p.strip()]

    def chunk(self, title: str, sections: Sequence[Section]) -> list[Chunk]:
        chunks: list[Chunk] = []
        for section in sections:
            text = section.text.strip()
            if not text:
                continue
            path = titled_path(title, section.heading_path)
            heading = " > ".join(path)
            prefix = self._prefix(path)
            prefix_tokens = self._count(prefix) + 2 if prefix else 0  # "\n\n" may cost tokens
            size = max(MIN_BODY_TOKENS, self.chunk_tokens - prefix_tokens)
            for piece in self.split(text, size):
                embed_text = f"{prefix}\n\n{piece}" if prefix else piece
                chunks.append(
                    Chunk(
                        index=len(chunks),
                        heading_path=heading,
                        content=piece,
                        embed_text=embed_text,
                        content_sha=sha256_text(embed_text),
                        token_count=self._count(piece),
                    )
                )
        self._check(chunks)
        return chunks

    def _check(self, chunks: list[Chunk]) -> None:
        limit = self.embedder.max_input_tokens - reserved_tokens(self.embedder)
        for chunk in chunks:
            n = self._count(chunk.embed_text)
            if n > limit:  # semchunk keeps pieces within size; this guards the arithmetic above
                raise AssertionError(
                    f"chunk {chunk.index} has {n} tokens, over the model's {limit}: a pgkb bug"
                )
