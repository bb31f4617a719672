"""The web interface (loader.web): one page of the catalogue, its filter menus, the run log's
newest runs, a chunk range of a document, the hits' highlighted snippets and the status counts."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

DOCUMENT_PAGE = """
SELECT document_id::text AS document_id, title, source_uri, collection, category, doc_type,
       summary, key_entities, chunk_count, edges_out, edges_in, updated_at, stale, total
  FROM kb.document_page(filters => %(filters)s::jsonb, document_type => %(doc_type)s,
                        title_words => %(words)s, sort => %(sort)s,
                        stale_after => %(stale_after)s::interval, page_offset => %(offset)s,
                        page_size => %(size)s, document_ids => %(ids)s::uuid[])
"""


@dataclasses.dataclass(frozen=True)
class DocumentPageRow:
    document_id: str
    title: str
    source_uri: str
    collection: str
    category: str | None
    doc_type: str
    summary: str | None
    key_entities: list[str]
    chunk_count: int
    edges_out: int
    edges_in: int
    updated_at: datetime.datetime
    stale: bool
    total: int


DOCUMENT_FACETS = "SELECT facet, value, documents FROM kb.document_facets(%(filters)s::jsonb)"
DOCUMENT_TOTAL = """
SELECT coalesce(sum(documents), 0)
  FROM kb.document_facets(%(filters)s::jsonb) WHERE facet = 'collection'
"""


@dataclasses.dataclass(frozen=True)
class FacetRow:
    facet: str
    value: str | None
    documents: int


INGEST_ACTIVITY = """
SELECT run_id, started_at, finished_at, running, paths, docs_new, docs_changed, docs_unchanged,
       docs_pruned, docs_failed, chunks_written, exit_code, error, failures
  FROM kb.ingest_activity(%s)
"""


@dataclasses.dataclass(frozen=True)
class IngestRunRow:
    run_id: int
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    running: bool
    paths: list[str]
    docs_new: int | None
    docs_changed: int | None
    docs_unchanged: int | None
    docs_pruned: int | None
    docs_failed: int | None
    chunks_written: int | None
    exit_code: int | None
    error: str | None
    failures: list[dict[str, Any]]


READ_DOCUMENT_RANGE = """
SELECT status, chunk_count, range_tokens, chunk_id, chunk_index, last_chunk_index, heading_path,
       content, token_count
  FROM kb.read_document(%(id)s::uuid, %(start)s, %(end)s, %(budget)s)
"""


@dataclasses.dataclass(frozen=True)
class ReadRow:
    status: str
    chunk_count: int | None
    range_tokens: int | None
    chunk_id: int | None
    chunk_index: int | None
    last_chunk_index: int | None
    heading_path: str | None
    content: str | None
    token_count: int | None


HEADLINES = """
SELECT h.n, ts_headline('english', h.content, q.query, %(options)s) AS headline
  FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS h(content, n),
       (SELECT coalesce(to_tsquery('simple',
                                   nullif(string_agg(quote_literal(t.lexeme), ' | '), '')),
                        ''::tsquery) AS query
          FROM kb.query_terms(%(query)s) t) q
 ORDER BY h.n
"""
"""Each text's best fragments with the query's terms between markers (ts_headline, no table
read: the texts are the hits' own); the query's lexemes (kb.query_terms) joined by OR, so any
one of them is marked."""

WEB_STATS = "SELECT kb.stats(0, %(filters)s::jsonb)"
"""kb.stats without the run log (the status page reads kb.ingest_activity for it)."""
