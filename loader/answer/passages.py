"""Passages: the retrieved chunks (or runs of neighbouring chunks) an answer is built from."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from loader.search import SearchHit, hit_value

CHARS_PER_TOKEN = 3.0
"""Conservative estimate for chat-model tokens (English is about 4 characters per token)."""


def estimate_tokens(text: str) -> int:
    """A conservative estimate of ``text``'s length in a chat model's tokens."""
    return int(len(text) / CHARS_PER_TOKEN) + 1


def as_uuid(value: Any) -> uuid.UUID:
    """A document id as a UUID (hits given as mappings may hold its text)."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


@dataclasses.dataclass(frozen=True)
class Passage:
    """A retrieved chunk (or a run of neighbouring chunks of one document) with its source."""

    document_id: uuid.UUID
    title: str
    source_uri: str
    chunk_index: int
    content: str
    score: float | None = None
    chunk_id: int | None = None
    heading_path: str = ""
    chunk_end: int | None = None
    """Last chunk index when neighbours were merged in (None: this chunk alone)."""

    @property
    def last_index(self) -> int:
        return self.chunk_index if self.chunk_end is None else self.chunk_end

    @classmethod
    def from_hit(cls, hit: SearchHit | Mapping[str, Any]) -> Passage:
        """A passage from a search hit (a :class:`~loader.search.SearchHit` or a mapping)."""
        score = hit_value(hit, "score")
        chunk_id = hit_value(hit, "chunk_id")
        return cls(
            document_id=as_uuid(hit_value(hit, "document_id")),
            title=str(hit_value(hit, "title") or ""),
            source_uri=str(hit_value(hit, "source_uri") or ""),
            chunk_index=int(hit_value(hit, "chunk_index") or 0),
            content=str(hit_value(hit, "content") or ""),
            score=None if score is None else float(score),
            chunk_id=None if chunk_id is None else int(chunk_id),
            heading_path=str(hit_value(hit, "heading_path") or ""),
        )

    def citation_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "title": self.title,
            "source_uri": self.source_uri,
            "document_id": str(self.document_id),
            "chunk_index": self.chunk_index,
            "content": self.content,
            "score": self.score,
        }
        if self.chunk_end is not None:
            data["chunk_end"] = self.chunk_end
        return data


@dataclasses.dataclass(frozen=True)
class RelatedDocument:
    document_id: uuid.UUID
    title: str
    source_uri: str
    relation: str
    """Why it is related: ``retrieved`` (found, not cited) or a graph relation type."""

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "document_id": str(self.document_id)}
