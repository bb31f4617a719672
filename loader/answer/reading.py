"""Reading a document: the one typed function behind the reader agent's ``read_document`` tool
(:meth:`loader.answer.tools.Toolbox.read_document`) and the servers' ``read_document``
(:meth:`loader.serve.service.KnowledgeService.read_document`).

``kb.read_document`` returns a document's chunks, or a chunk range of them, or, when they do not
fit the token budget, the document's outline (its sections with their chunk ranges and tokens),
so the reader asks for a smaller range. The range is checked against the document first: an
inverted range, a start past the end or a negative end is refused with a message naming the
valid range (:class:`Refusal`); a negative start or an end past the last chunk is clamped, with
a note.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row

from loader.answer.passages import Passage, estimate_tokens
from loader.db import queries


class Refusal(Exception):
    """A request the caller can fix (the agent's model, a server's client), with a message
    saying how."""


@dataclasses.dataclass(frozen=True)
class DocumentInfo:
    document_id: uuid.UUID
    title: str
    source_uri: str
    chunk_count: int


def document_infos(
    conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID], category: str | None = None
) -> dict[uuid.UUID, DocumentInfo]:
    """The documents among ``ids`` that exist within ``category`` (and the session's
    collections), by id; the others are left out."""
    with conn.cursor(row_factory=class_row(queries.DocumentRow)) as cur:
        rows = cur.execute(
            queries.DOCUMENTS_BY_ID,
            {"ids": list(ids), "filters": json.dumps({"category": category} if category else {})},
        ).fetchall()
    return {
        row.document_id: DocumentInfo(row.document_id, row.title, row.source_uri, row.chunk_count)
        for row in rows
    }


@dataclasses.dataclass(frozen=True)
class DocumentRead:
    """What one read returned: the chunks (``status`` "chunks"), the outline with a message
    asking for a smaller range ("outline"), or nothing in the range ("empty")."""

    document: DocumentInfo
    status: str
    passages: list[Passage]
    outline: list[str]
    message: str | None
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the agent's model and the servers' clients read."""
        info = self.document
        out: dict[str, Any] = {
            "document_id": str(info.document_id),
            "title": info.title,
            "source_uri": info.source_uri,
            "chunk_count": info.chunk_count,
            "status": self.status,
        }
        if self.status == "chunks":
            out["chunks"] = [
                {
                    "chunk_id": p.chunk_id,
                    "chunk_index": p.chunk_index,
                    "heading_path": p.heading_path,
                    "content": p.content,
                }
                for p in self.passages
            ]
        elif self.status == "outline":
            out["outline"] = self.outline
        if self.message is not None:
            out["message"] = self.message
        if self.notes:
            out["notes"] = self.notes
        return out


def read_document(
    conn: psycopg.Connection[Any],
    document: DocumentInfo,
    *,
    chunk_start: int | None = None,
    chunk_end: int | None = None,
    budget: int,
    notes: Sequence[str] = (),
) -> DocumentRead:
    """Read ``document`` (whole, or chunks ``chunk_start..chunk_end``, inclusive, from 0) within
    ``budget`` tokens (kb.read_document); what does not fit comes back as its outline.

    Raises :class:`Refusal` for a range the caller must change. ``notes`` (e.g. arguments the
    caller ignored) come back first in the result's notes."""
    info = document
    notes = list(notes)
    if info.chunk_count == 0:
        raise Refusal(f"document {info.document_id} ({info.title}) has no chunks")
    last = info.chunk_count - 1
    start, end = chunk_start, chunk_end
    if start is not None and end is not None and start > end:
        raise Refusal(
            f"chunk_start {start} is after chunk_end {end}; ask for chunk_start <= chunk_end "
            f"(this document has chunks 0..{last})"
        )
    if start is not None and start > last:
        raise Refusal(
            f"chunk_start {start} is past the end: {info.title!r} has {info.chunk_count} "
            f"chunks (0..{last})"
        )
    if start is not None and start < 0:
        notes.append(f"chunk_start {start} clamped to 0")
        start = 0
    if end is not None and end < 0:
        raise Refusal(f"chunk_end {end} is negative; chunks are numbered 0..{last}")
    if end is not None and end > last:
        notes.append(f"chunk_end {end} clamped to {last} (the document's last chunk)")
        end = last
    with conn.cursor(row_factory=dict_row) as cur:
        records = cur.execute(
            queries.READ_DOCUMENT, (info.document_id, start, end, budget)
        ).fetchall()
    status = str(records[0]["status"]) if records else "empty"
    if status == "chunks":
        passages = [
            Passage(
                document_id=info.document_id,
                title=info.title,
                source_uri=info.source_uri,
                chunk_index=int(r["chunk_index"]),
                content=str(r["content"]),
                heading_path=str(r.get("heading_path") or ""),
                chunk_id=None if r.get("chunk_id") is None else int(r["chunk_id"]),
            )
            for r in records
        ]
        return DocumentRead(info, status, passages, [], None, notes)
    if status != "outline":
        return DocumentRead(info, status, [], [], "no chunk in that range", notes)
    span = (
        "the whole document"
        if start is None and end is None
        else f"chunks {start if start is not None else 0}.."
        f"{end if end is not None else info.chunk_count - 1}"
    )
    tokens = records[0].get("range_tokens")
    outline, left_out = outline_lines(records, budget)
    message = (
        f"{span} ({tokens} tokens) does not fit the remaining context budget of "
        f"about {budget} tokens, so here is its outline instead (chunk ranges: "
        "heading, tokens); call read_document again with a smaller "
        "chunk_start..chunk_end range, choosing the section you need "
        f"(chunks 0..{info.chunk_count - 1})"
    )
    if left_out:
        message += (
            f"; the outline itself was cut: {left_out} more section(s) after chunk "
            f"{records[len(outline) - 1]['last_chunk_index']}, read a range from there "
            "to see their outline"
        )
    return DocumentRead(info, status, [], outline, message, notes)


def outline_lines(records: Sequence[Mapping[str, Any]], budget: int) -> tuple[list[str], int]:
    """One line per section ("0-9: Heading > Sub (730 tokens)"), as many as fit ``budget``."""
    lines: list[str] = []
    used = 0
    for record in records:
        first, last = record["chunk_index"], record["last_chunk_index"]
        span = f"{first}" if first == last else f"{first}-{last}"
        heading = record.get("heading_path") or "(no heading)"
        line = f"{span}: {heading} ({record.get('token_count')} tokens)"
        cost = estimate_tokens(line) + 2
        if len(lines) >= 3 and used + cost > budget - 150:
            break
        lines.append(line)
        used += cost
    return lines, len(records) - len(lines)
