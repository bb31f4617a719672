"""Reading for answers: the three searches, the abstention gate's signals, the corpus's
similarity profile, neighbouring chunks and documents (loader.search, loader.answer)."""

from __future__ import annotations

import dataclasses
import uuid

# --- search (loader.search): one statement per mode, the same columns ------------------------
# (the query's vector is sent in pgvector's text form and cast here: no numpy needed to send it)

HYBRID_SEARCH = """
SELECT chunk_id, document_id, title, source_uri, chunk_index, heading_path, content, score,
       vector_rank, vector_similarity, keyword_rank, keyword_score, category, metadata, token_count
  FROM kb.hybrid_search(
           query_text => %(query_text)s,
           query_embedding => %(query_embedding)s::vector,
           match_count => %(match_count)s,
           vector_candidates => %(vector_candidates)s,
           keyword_candidates => %(keyword_candidates)s,
           rrf_k => %(rrf_k)s,
           vector_weight => %(vector_weight)s,
           keyword_weight => %(keyword_weight)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           min_similarity => %(min_similarity)s,
           model => %(model)s,
           keyword_ranking => %(keyword_ranking)s,
           max_per_document => %(max_per_document)s,
           exact_keyword_weight => %(exact_keyword_weight)s,
           ef_search => %(ef_search)s,
           keyword_confidence => %(keyword_confidence)s,
           lead_slot => %(lead_slot)s)
"""

VECTOR_SEARCH = """
WITH v AS MATERIALIZED (
    SELECT * FROM kb.vector_search(
           query_embedding => %(query_embedding)s::vector,
           match_count => %(match_count)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           min_similarity => %(min_similarity)s,
           model => %(model)s,
           ef_search => %(ef_search)s))
SELECT v.chunk_id, v.document_id, v.title, v.source_uri, v.chunk_index, v.heading_path, v.content,
       v.similarity AS score, v.rank AS vector_rank, v.similarity AS vector_similarity,
       NULL::integer AS keyword_rank, NULL::double precision AS keyword_score,
       d.category, coalesce(d.metadata, '{}'::jsonb) AS metadata, d.token_count
  FROM v LEFT JOIN kb.chunk_details(ARRAY(SELECT v.chunk_id FROM v)) AS d
       ON d.chunk_id = v.chunk_id
 ORDER BY v.rank
"""

KEYWORD_SEARCH = """
WITH k AS MATERIALIZED (
    SELECT * FROM kb.keyword_search(
           query_text => %(query_text)s,
           match_count => %(match_count)s,
           filters => %(filters)s::jsonb,
           document_ids => %(document_ids)s::uuid[],
           keyword_ranking => %(keyword_ranking)s))
SELECT k.chunk_id, k.document_id, k.title, k.source_uri, k.chunk_index, k.heading_path, k.content,
       k.score, NULL::integer AS vector_rank, NULL::double precision AS vector_similarity,
       k.rank AS keyword_rank, k.score AS keyword_score,
       d.category, coalesce(d.metadata, '{}'::jsonb) AS metadata, d.token_count
  FROM k LEFT JOIN kb.chunk_details(ARRAY(SELECT k.chunk_id FROM k)) AS d
       ON d.chunk_id = k.chunk_id
 ORDER BY k.rank
"""
"""Both modes read the chunks' category, metadata and token count through kb.chunk_details, so
a kb_reader role (no table privilege) gets the same columns as hybrid mode."""

QUOTED_PARTS = """
SELECT p.part, numnode(websearch_to_tsquery('english', '"' || p.part || '"')) > 0 AS indexed
  FROM unnest((kb.search_query(%s)).quoted) AS p(part)
"""
"""The quoted parts of a search text (what kb.keyword_search requires), and whether each has a
lexeme the index keeps (a part of stop words or punctuation alone cannot be matched)."""

# --- the abstention gate (loader.answer.abstention) ----------------------------------------------

QUERY_TERMS = "SELECT lexeme, df, idf FROM kb.query_terms(%(query)s)"


@dataclasses.dataclass(frozen=True)
class QueryTerm:
    lexeme: str
    df: int
    idf: float


# The abstention gate's corpus checks, each a SECURITY DEFINER function (sql_functions/), so a
# kb_reader role, which has no table privilege, gets the same verdicts as the owner.
NAME_FOUND = "SELECT kb.name_found(%(phrase)s, %(regex)s)"
"""Does the exact name (whole words, any case) occur in some chunk (see kb.name_found)?"""
WORD_LEXEMES = "SELECT word, absent, lexemes FROM kb.word_lexemes(%(words)s::text[])"
NEAR_LEXEMES = "SELECT kb.near_lexemes(%(lexeme)s)"
"""Corpus lexemes that could be the word a misspelled one meant (the caller computes the edit
distance on this short list)."""
SQUASHED_LEXEME_FOUND = "SELECT kb.squashed_lexeme_found(%(squashed)s)"
CHUNK_LEXEMES = "SELECT chunk_id, lexemes FROM kb.chunk_lexemes(%(ids)s, %(lexemes)s::text[])"
ABSTENTION_RULE = "SELECT kb.abstention_rule()"
"""The calibrated rule stored in kb.settings (NULL when none)."""

# --- the corpus's similarity profile (loader.similarity) ----------------------

SIMILARITY_PROFILE = "SELECT kb.similarity_profile()"
PROFILE_STATE = "SELECT (SELECT name FROM kb.active_model()), chunk_count FROM kb.corpus_stats"
PSEUDO_QUERIES = "SELECT chunk_id, query FROM kb.pseudo_queries(%s)"
BEST_SIMILARITY = "SELECT max(similarity) FROM kb.vector_search(%s, 1)"
SAVE_SETTING = """
INSERT INTO kb.settings (key, value) VALUES (%s, %s)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()
"""

# --- context and related documents (loader.answer.context, loader.answer.tools) --------------

MERGE_NEIGHBOURS = """
SELECT m.chunk_start, m.chunk_end, m.content
  FROM kb.merge_neighbors(%(chunk_id)s, %(before)s, %(after)s) AS m
"""


@dataclasses.dataclass(frozen=True)
class MergedSpan:
    chunk_start: int
    chunk_end: int
    content: str


DOCUMENTS_BY_ID = """
SELECT document_id, title, source_uri, chunk_count
  FROM kb.document_list(filters => %(filters)s::jsonb, document_ids => %(ids)s::uuid[],
                        max_results => 10000)
"""
"""The documents the agent may name: with a category (the question's scope), only its own."""


@dataclasses.dataclass(frozen=True)
class DocumentRow:
    document_id: uuid.UUID
    title: str
    source_uri: str
    chunk_count: int


READ_DOCUMENT = "SELECT * FROM kb.read_document(%s::uuid, %s, %s, %s)"

NEIGHBOR_CHUNKS_IN_SCOPE = """
WITH n AS MATERIALIZED (
    SELECT * FROM kb.neighbor_chunks(%(chunk_id)s, %(before)s, %(after)s)
), d AS (
    SELECT document_id, title, source_uri
      FROM kb.document_list(filters => %(filters)s::jsonb,
                            document_ids => ARRAY(SELECT DISTINCT n.document_id FROM n))
)
SELECT n.chunk_id, n.document_id, d.title, d.source_uri, n.chunk_index, n.heading_path,
       n.content, n.is_hit
  FROM n JOIN d ON d.document_id = n.document_id
 ORDER BY n.chunk_index
"""
"""A chunk and its neighbours, only when its document is within the filters (the servers'
category scope), with the document's title and source."""
PING = "SELECT 1"
"""Rows vary with the status (chunks or outline): read with ``dict_row``."""

SOURCE_URIS = "SELECT source_uri FROM kb.documents"
