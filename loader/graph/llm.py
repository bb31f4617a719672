"""Metadata and typed edges from a chat model, validated, with the deterministic version as
the fallback.

One call per new or changed document (temperature 0, explicit JSON instructions, bounded
input: title, outline and the first chunks within :data:`INPUT_TOKENS`). When other documents
exist, the same call sees up to :data:`MAX_CANDIDATES` of them, the best by shared key entities
(+3 each) and shared non-stop-words in titles and summaries (+1 each), under short ids (``D1``,
``D2``, ...) and may propose typed edges to or from them. The knowledge base holding no other
document means no candidates and no edge part in the request.

The reply is parsed defensively (:func:`parse_reply`): ``<think>`` blocks and code fences are
stripped, the JSON object is validated, chunk ranges are clamped and put in order, empty titles
filled, unknown document types become ``general``; each proposed edge must name a candidate,
a valid type, the document at one end and not be a self-loop or a duplicate. Any failure (no
answer, timeout, HTTP error, malformed or enormous JSON, no valid summary) keeps the
deterministic metadata already stored; ingestion never fails because of the model.

This module builds the request and reads the reply; no database. The calls, one document at a
time, and the writes are :func:`loader.graph.store.enrich_documents`'s.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

from loader.graph.metadata import DOC_TYPES, STOP_WORDS, DocumentMetadata, TocEntry
from loader.graph.relations import RELATION_TYPES
from loader.providers.chat import ChatClient
from loader.settings import Settings

MAX_CANDIDATES = 15
INPUT_TOKENS = 1500
"""Budget for the document's own text in the request (estimated at 4 characters a token)."""
MAX_REPLY_CHARS = 100_000
"""A longer reply is not parsed (a runaway model); the deterministic metadata stays."""
MAX_REPLY_TOKENS = 1200
MAX_ENTITIES = 15
MAX_TOC = 200
MAX_SUMMARY = 800
MAX_EVIDENCE = 200

SYSTEM_PROMPT = (
    """You describe one document of a knowledge base. Answer with ONE JSON object \
and nothing else (no prose, no code fence), with these keys:
  "summary": 1 to 3 sentences saying what the document is about;
  "doc_type": one of "policy", "manual", "technical_spec", "report", "reference", "general";
  "key_entities": up to 10 short strings: names, identifiers, products, terms it is about;
  "toc": the outline, a list of {"title": string, "level": 1-6, "chunk_start": int, \
"chunk_end": int} using the chunk numbers shown ([chunk N]), in document order;
  "relations": a list of {"to" or "from": a candidate id such as "D3", "relation_type": one of \
"""
    + ", ".join(f'"{kind}"' for kind in RELATION_TYPES)
    + """, "evidence": a short reason} \
for candidates this document clearly relates to ("to": this document -> candidate, "from": \
candidate -> this document); [] when none or when no candidates are listed."""
)


@dataclasses.dataclass(frozen=True)
class Candidate:
    short_id: str
    document_id: str
    title: str
    summary: str


@dataclasses.dataclass(frozen=True)
class ProposedEdge:
    source_id: str
    target_id: str
    relation_type: str
    evidence: str
    confidence: float | None = None


class ReplyError(ValueError):
    """The model's reply cannot be used (the message says why)."""


# --- candidates ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"[a-z0-9][a-z0-9_]+")


def _words(text: str) -> set[str]:
    return {w for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS and len(w) > 2}


def rank_candidates(
    document_id: str,
    title: str,
    summary: str,
    entities: Sequence[str],
    profiles: Sequence[tuple[str, str, str, Sequence[str]]],
    limit: int = MAX_CANDIDATES,
) -> list[Candidate]:
    """The ``limit`` other documents sharing most with this one: +3 per shared key entity, +1
    per shared non-stop-word of titles and summaries; ties by title then id; score 0 excluded."""
    mine_entities = {e.lower() for e in entities}
    mine_words = _words(f"{title} {summary}")
    scored: list[tuple[int, str, str, str, str]] = []
    for other_id, other_title, other_summary, other_entities in profiles:
        if other_id == document_id:
            continue
        score = 3 * len(mine_entities & {e.lower() for e in other_entities or []})
        score += len(mine_words & _words(f"{other_title} {other_summary}"))
        if score > 0:
            scored.append((-score, other_title, other_id, other_title, other_summary))
    scored.sort()
    return [
        Candidate(f"D{i}", other_id, other_title, other_summary)
        for i, (_s, _t, other_id, other_title, other_summary) in enumerate(scored[:limit], 1)
    ]


# --- the request --------------------------------------------------------------------------------


def build_messages(
    title: str,
    toc: Sequence[dict[str, Any]],
    chunks: Sequence[tuple[int, str, str]],
    chunk_count: int,
    candidates: Sequence[Candidate],
    input_tokens: int = INPUT_TOKENS,
) -> list[dict[str, str]]:
    """System + user message; the document's text is cut to ``input_tokens`` (4 chars each)."""
    budget = input_tokens * 4
    parts = [f"Title: {title}", f"Chunks: {chunk_count} (numbered 0 to {chunk_count - 1})"]
    if toc:
        lines = [
            f"{'  ' * (int(e.get('level', 1)) - 1)}- {e.get('title', '')} "
            f"[chunks {e.get('chunk_start')}-{e.get('chunk_end')}]"
            for e in toc[:60]
        ]
        parts.append("Outline so far:\n" + "\n".join(lines))
    text: list[str] = []
    used = 0
    for index, heading, content in chunks:
        piece = f"[chunk {index}] {heading}\n{content}".strip()
        if used + len(piece) > budget:
            piece = piece[: max(0, budget - used)]
            if piece:
                text.append(piece)
            break
        text.append(piece)
        used += len(piece)
    parts.append("Beginning of the document:\n" + "\n\n".join(text))
    if candidates:
        listing = "\n".join(
            f"{c.short_id}: {c.title}" + (f" - {c.summary[:200]}" if c.summary else "")
            for c in candidates
        )
        parts.append("Candidate related documents:\n" + listing)
    else:
        parts.append('Candidate related documents: none (answer "relations": []).')
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


# --- the reply ----------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def extract_json(text: str | None) -> dict[str, object]:
    """The JSON object in a reply (think blocks and code fences removed); ReplyError if none."""
    if not text or not text.strip():
        raise ReplyError("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise ReplyError(f"reply too long ({len(text)} characters, limit {MAX_REPLY_CHARS})")
    text = _THINK.sub("", text)
    if re.search(r"<think>", text, re.I):  # an unclosed think block: the answer never came
        raise ReplyError("unfinished <think> block")
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ReplyError("no JSON object in the reply")
    try:
        value: object = json.loads(text[start : end + 1])
    except ValueError as exc:
        raise ReplyError(f"malformed JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ReplyError("the reply is not a JSON object")
    return value


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 1e12:
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,12}\s*", value):
        return int(value)
    return None


def parse_reply(
    text: str | None,
    *,
    document_id: str,
    chunk_count: int,
    candidates: Sequence[Candidate],
    fallback: DocumentMetadata,
) -> tuple[DocumentMetadata, list[ProposedEdge]]:
    """Validated metadata and edges from the model's reply; ReplyError when it is unusable.

    A missing or empty summary makes the reply unusable. Other fields fall back one by one:
    an unknown doc_type is ``general``; entities keep only non-empty strings; outline entries
    without integer chunk numbers are dropped, the rest clamped to 0..chunk_count-1 and put in
    order, empty titles filled (``Section N``); no valid entry: the fallback's outline.
    """
    data = extract_json(text)
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise ReplyError("no summary in the reply")
    summary = " ".join(summary.split())[:MAX_SUMMARY]
    raw_type = data.get("doc_type")
    kind = raw_type.strip().lower() if isinstance(raw_type, str) else "general"
    kind = kind if kind in DOC_TYPES else "general"
    entities: list[str] = []
    raw_entities = data.get("key_entities")
    for item in raw_entities if isinstance(raw_entities, list) else []:
        if isinstance(item, str) and item.strip() and len(entities) < MAX_ENTITIES:
            value = " ".join(item.split())[:80]
            if value.lower() not in {e.lower() for e in entities}:
                entities.append(value)
    toc = _parse_toc(data.get("toc"), chunk_count) or list(fallback.toc)
    metadata = DocumentMetadata(
        summary=summary,
        doc_type=kind,
        key_entities=entities or list(fallback.key_entities),
        toc=toc,
        origin="llm",
    )
    return metadata, _parse_edges(data.get("relations"), document_id, candidates)


def _parse_toc(raw: object, chunk_count: int) -> list[TocEntry]:
    if not isinstance(raw, list) or chunk_count < 1:
        return []
    last = chunk_count - 1
    entries: list[TocEntry] = []
    for item in raw:
        if len(entries) >= MAX_TOC:
            break
        if not isinstance(item, dict):
            continue
        start, end = _as_int(item.get("chunk_start")), _as_int(item.get("chunk_end"))
        if start is None and end is None:
            continue
        start = end if start is None else start
        end = start if end is None else end
        assert start is not None and end is not None
        start, end = min(max(start, 0), last), min(max(end, 0), last)
        if start > end:
            start, end = end, start
        level = _as_int(item.get("level")) or 1
        title = item.get("title")
        title = " ".join(title.split())[:200] if isinstance(title, str) else ""
        entries.append(
            TocEntry(title or f"Section {len(entries) + 1}", min(max(level, 1), 6), start, end)
        )
    entries.sort(key=lambda e: (e.chunk_start, e.level))
    return entries


def _parse_edges(
    raw: object, document_id: str, candidates: Sequence[Candidate]
) -> list[ProposedEdge]:
    if not isinstance(raw, list) or not candidates:
        return []
    by_key: dict[str, str] = {}
    for c in candidates:
        by_key[c.short_id.lower()] = c.document_id
        by_key[c.document_id.lower()] = c.document_id
    edges: list[ProposedEdge] = []
    seen: set[tuple[str, str, str]] = set()
    for item in raw[:100]:
        if not isinstance(item, dict):
            continue
        kind = item.get("relation_type")
        if not isinstance(kind, str) or kind.strip().lower() not in RELATION_TYPES:
            continue
        kind = kind.strip().lower()
        to, frm = item.get("to"), item.get("from")
        if isinstance(to, str) and frm is None:
            other, outgoing = by_key.get(to.strip().lower()), True
        elif isinstance(frm, str) and to is None:
            other, outgoing = by_key.get(frm.strip().lower()), False
        else:
            continue  # neither or both ends named
        if other is None or other == document_id:  # not a candidate (hallucinated), self-loop
            continue
        source, target = (document_id, other) if outgoing else (other, document_id)
        if (source, target, kind) in seen:
            continue
        seen.add((source, target, kind))
        evidence = item.get("evidence")
        evidence = " ".join(evidence.split())[:MAX_EVIDENCE] if isinstance(evidence, str) else ""
        confidence = item.get("confidence")
        conf = (
            min(max(float(confidence), 0.0), 1.0)
            if isinstance(confidence, int | float) and not isinstance(confidence, bool)
            else None
        )
        edges.append(ProposedEdge(source, target, kind, evidence, conf))
    return edges


# --- the calls ----------------------------------------------------------------------------------


def chat_client(settings: Settings) -> ChatClient:
    """The chat client for metadata: at most one retry per document (ingestion moves on to the
    deterministic metadata rather than wait)."""
    return ChatClient(settings, max_retries=min(settings.chat_max_retries, 1))


def complete(client: ChatClient, messages: list[dict[str, str]]) -> str | None:
    reply = client.complete(messages, options={"temperature": 0, "max_tokens": MAX_REPLY_TOKENS})
    return reply.content
