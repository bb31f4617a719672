"""Writing the graph during ingestion.

:meth:`GraphWriter.write` runs inside the transaction that replaces a document's chunks: it
stores the deterministic metadata (when the content hash changed), replaces the document's
outgoing links and edges, and turns the links other documents hold to it into edges (a link to
a document ingested later becomes an edge when it arrives). Incoming edges are never touched:
they point at the stable document id.

:meth:`GraphWriter.finish` runs once at the end of a run: mention edges for the documents the
run wrote (outgoing against every document, and incoming from the others for new documents),
then, when a chat model is configured, the model's metadata and typed edges
(:func:`enrich_documents`; the request and the reply's checks are in :mod:`loader.graph.llm`),
each document in its own short transaction, skipped when the document was deleted or changed
while its call was running (the update checks its content hash).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.filters import DEFAULT_COLLECTION
from loader.graph import llm
from loader.graph.links import Link, MentionIndex
from loader.graph.metadata import ChunkLike, DocumentMetadata, TocEntry, deterministic
from loader.settings import Settings

log = logging.getLogger(__name__)

MENTION_CHUNKS = 2000
"""Mentions are looked for in at most this many chunks of a document (bounded work)."""
MENTION_SEARCHES = 50
"""Up to this many new documents, the older documents mentioning each are found through the
full-text index (one phrase query per title or file name); beyond, one pass over their text."""


@dataclasses.dataclass
class GraphStats:
    links: int = 0
    link_edges: int = 0
    mention_edges: int = 0
    llm_documents: int = 0
    llm_fallbacks: int = 0
    llm_edges: int = 0
    llm_skipped: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Written:
    document_id: str
    title: str
    source_uri: str
    content_sha: str
    is_new: bool


class GraphWriter:
    """The graph side of one ingestion run."""

    def __init__(self, collection: str | None = DEFAULT_COLLECTION) -> None:
        self.collection = collection
        """The run's collection: links and mentions resolve to its documents only (None: to
        every collection's, the graph_across_collections setting)."""
        self.stats = GraphStats()
        self.written: list[_Written] = []
        self.seconds = 0.0

    def write(
        self,
        conn: psycopg.Connection[Any],
        document_id: Any,
        *,
        source_uri: str,
        title: str,
        content_sha: str,
        chunks: Sequence[ChunkLike],
        links: Sequence[Link],
        is_new: bool,
    ) -> None:
        """Metadata, links and link edges of one document, in the caller's transaction."""
        started = time.perf_counter()
        row = conn.execute(queries.METADATA_SHA, (document_id,)).fetchone()
        if row is None or row[0] != content_sha:
            store_metadata(conn, document_id, deterministic(title, source_uri, chunks))
        conn.execute(queries.DELETE_REINDEXED_RELATIONS, {"id": document_id})
        conn.execute(queries.DELETE_DOCUMENT_LINKS, (document_id,))
        if links:
            conn.execute(
                queries.INSERT_DOCUMENT_LINKS,
                {
                    "id": document_id,
                    "targets": [link.target_uri for link in links],
                    "hrefs": [link.href for link in links],
                    "anchors": [link.anchor for link in links],
                },
            )
            self.stats.links += len(links)
            out = conn.execute(
                queries.LINK_EDGES_OUT, {"id": document_id, "across": self.collection is None}
            )
            self.stats.link_edges += out.rowcount
        self.stats.link_edges += conn.execute(
            queries.LINK_EDGES_IN,
            {"id": document_id, "uri": source_uri, "across": self.collection is None},
        ).rowcount
        self.written.append(_Written(str(document_id), title, source_uri, content_sha, is_new))
        self.seconds += time.perf_counter() - started

    def finish(self, conn: psycopg.Connection[Any], settings: Settings | None = None) -> GraphStats:
        """Mention edges for the documents written, then the chat model's part (if any)."""
        started = time.perf_counter()
        if self.written:
            self._mentions(conn)
        self.seconds += time.perf_counter() - started
        if self.written and settings is not None and settings.chat_model:
            started = time.perf_counter()
            enrich_documents(
                conn, settings, [w.document_id for w in self.written], self.stats,
                collection=self.collection,
            )  # fmt: skip
            self.seconds += time.perf_counter() - started
        return self.stats

    def _mentions(self, conn: psycopg.Connection[Any]) -> None:
        with conn.cursor(row_factory=class_row(queries.DocumentNameRow)) as cur:
            documents = [
                (r.document_id, r.title, r.source_uri)
                for r in cur.execute(
                    queries.DOCUMENT_NAMES, {"collection": self.collection}
                ).fetchall()
            ]
        conn.commit()
        index = MentionIndex.build(documents)
        if not index.by_first_word and not index.by_file_name:
            return
        written_ids = [w.document_id for w in self.written]
        found: list[tuple[str, str, str]] = []  # (source, target, evidence)
        for item in self.written:  # outgoing, against every document
            texts = _chunk_texts(conn, item.document_id)
            for target, evidence in index.find(item.document_id, texts).items():
                found.append((item.document_id, target, evidence))
        # incoming, for new documents: from the documents this run did not write
        new = [w for w in self.written if w.is_new]
        others = [d[0] for d in documents if d[0] not in set(written_ids)]
        if new and others and len(new) > MENTION_SEARCHES:
            # many new documents: one pass over the other documents' text
            new_index = MentionIndex.build([(w.document_id, w.title, w.source_uri) for w in new])
            for source in others:
                texts = _chunk_texts(conn, source)
                for target, evidence in new_index.find(source, texts).items():
                    found.append((source, target, evidence))
            new = []
        for item in new if others else []:
            single = MentionIndex.build([(item.document_id, item.title, item.source_uri)])
            phrases = [" ".join(words) for entries in single.by_first_word.values()
                       for words, _ in entries] + list(single.by_file_name)  # fmt: skip
            for phrase in phrases:
                rows = conn.execute(
                    queries.MENTION_CANDIDATES,
                    {"phrase": phrase, "exclude": written_ids, "collection": self.collection},
                ).fetchall()
                for (source,) in rows:
                    texts = _chunk_texts(conn, source)
                    hit = single.find(source, texts).get(item.document_id)
                    if hit:
                        found.append((source, item.document_id, hit))
        conn.commit()
        with conn.transaction():
            for source, target, evidence in found:
                self.stats.mention_edges += conn.execute(
                    queries.INSERT_RELATION,
                    {
                        "source": source,
                        "target": target,
                        "type": "references",
                        "origin": "mention",
                        "evidence": evidence,
                        "confidence": None,
                    },
                ).rowcount


def store_metadata(
    conn: psycopg.Connection[Any],
    document_id: Any,
    metadata: DocumentMetadata,
    *,
    content_sha: str | None = None,
) -> bool:
    """Write ``metadata`` to the document; with ``content_sha``, only if it still has that
    content (False: deleted or changed meanwhile, nothing written)."""
    params = {
        "id": document_id,
        "summary": metadata.summary,
        "doc_type": metadata.doc_type,
        "key_entities": list(metadata.key_entities),
        "toc": json.dumps([e.to_dict() for e in metadata.toc], ensure_ascii=False),
        "origin": metadata.origin,
        "content_sha": content_sha,
    }
    query = (
        queries.SET_DOCUMENT_METADATA
        if content_sha is None
        else queries.SET_DOCUMENT_METADATA_IF_CURRENT
    )
    return bool(conn.execute(query, params).rowcount)


def enrich_documents(
    conn: psycopg.Connection[Any],
    settings: Settings,
    document_ids: Sequence[str],
    stats: GraphStats,
    *,
    collection: str | None = None,
) -> None:
    """The chat model's metadata and edges for ``document_ids``; never raises for the model."""
    try:
        client = llm.chat_client(settings)
    except Exception as exc:  # e.g. the openai package refusing the configuration
        log.warning("chat model unusable, keeping deterministic metadata: %s", exc)
        stats.llm_fallbacks += len(document_ids)
        return
    with conn.cursor(row_factory=class_row(queries.DocumentProfileRow)) as profile_cur:
        profiles = [
            (r.document_id, r.title, r.summary, list(r.key_entities or []))
            for r in profile_cur.execute(
                queries.DOCUMENT_PROFILES, {"collection": collection}
            ).fetchall()
        ]
    conn.commit()
    for document_id in document_ids:
        with conn.cursor(row_factory=class_row(queries.DocumentForMetadataRow)) as document_cur:
            row = document_cur.execute(queries.DOCUMENT_FOR_METADATA, (document_id,)).fetchone()
        chunks: list[tuple[int, str, str]] = []
        if row is not None:
            with conn.cursor(row_factory=class_row(queries.ChunkTextRow)) as chunk_cur:
                chunks = [
                    (c.chunk_index, c.heading_path, c.content)
                    for c in chunk_cur.execute(queries.FIRST_CHUNKS, (document_id,)).fetchall()
                ]
        conn.commit()
        if row is None:
            stats.llm_skipped += 1
            continue
        title, source, content_sha = row.title, row.source_uri, row.content_sha
        summary, entities, toc = row.summary, row.key_entities, row.toc
        chunk_count = row.chunk_count
        candidates = llm.rank_candidates(
            document_id, title, summary or "", entities or [], profiles
        )
        messages = llm.build_messages(title, toc or [], chunks, chunk_count, candidates)

        class _Chunk:
            def __init__(self, index: int, heading_path: str, content: str) -> None:
                self.index, self.heading_path, self.content = index, heading_path, content

        fallback = deterministic(title, source, [_Chunk(*c) for c in chunks])
        fallback = dataclasses.replace(fallback, toc=[TocEntry(**e) for e in toc or []])
        try:
            reply = llm.complete(client, messages)
            metadata, edges = llm.parse_reply(
                reply,
                document_id=document_id,
                chunk_count=chunk_count,
                candidates=candidates,
                fallback=fallback,
            )
        except Exception as exc:  # the model failing in any way keeps the deterministic version
            log.warning("chat model metadata for %s failed, keeping deterministic: %s", source, exc)
            stats.llm_fallbacks += 1
            continue
        with conn.transaction():
            if not store_metadata(conn, document_id, metadata, content_sha=content_sha):
                stats.llm_skipped += 1  # deleted or changed while the model was answering
                continue
            conn.execute(queries.DELETE_LLM_RELATIONS, (document_id,))
            for edge in edges:
                stats.llm_edges += conn.execute(
                    queries.INSERT_RELATION,
                    {
                        "source": edge.source_id,
                        "target": edge.target_id,
                        "type": edge.relation_type,
                        "origin": "llm",
                        "evidence": edge.evidence or None,
                        "confidence": edge.confidence,
                    },
                ).rowcount
        stats.llm_documents += 1


def _chunk_texts(conn: psycopg.Connection[Any], document_id: str) -> list[str]:
    """The text of a document's first :data:`MENTION_CHUNKS` chunks, in order."""
    return [r[0] for r in conn.execute(queries.CHUNK_TEXTS, (document_id, MENTION_CHUNKS))]
