"""What a valid configuration is: the range of each setting and the rules between settings, as
the sentences :meth:`loader.settings.Settings.validate` reports (every problem at once, each
naming the setting, the value and what is accepted).

The settings object is handed in untyped: this module sits below :mod:`loader.settings`, which
imports it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any
from urllib.parse import urlsplit

from loader.errors import ConfigError
from loader.filters import SearchFilters, check_collection

DEFAULT_CHUNK_TOKENS = 200
"""``chunk_tokens`` when unset (less when the embedding model reads less)."""
PG_INT_MAX = 2_147_483_647
"""The largest PostgreSQL ``integer``: integer settings reach SQL functions as that type."""


def parse_filters(raw: str | None) -> SearchFilters:
    """``search_filters``, parsed (empty when unset)."""
    return SearchFilters.parse(raw, where="setting search_filters")


def collection_names(raw: str | None) -> tuple[str, ...]:
    """``collections``, split and checked (empty when unset)."""
    names = [n.strip() for n in (raw or "").split(",") if n.strip()]
    return tuple(dict.fromkeys(check_collection(n, where="setting collections") for n in names))


def origin_of(url: str, *, where: str = "origin") -> str:
    """``url``'s origin as ``scheme://host[:port]`` (the port only when it is not the scheme's
    default), or a :class:`ConfigError` naming it."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{where} {url!r} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{where} {url!r} is not an http(s) origin",
            hint="give it as scheme://host[:port], e.g. https://docs.example.org",
        )
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[scheme]
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


def origin_list(raw: str | None) -> tuple[str, ...]:
    """``web_allowed_origins``, split and checked (empty when unset)."""
    names = [n.strip() for n in (raw or "").split(",") if n.strip()]
    return tuple(dict.fromkeys(origin_of(n, where="web_allowed_origins entry") for n in names))


def problems_of(settings: Any) -> list[str]:
    """What is wrong with ``settings`` (a :class:`~loader.settings.Settings`): one sentence per
    invalid value, naming it; empty when nothing is."""
    problems = number_problems(settings)
    if settings.serve_timeout <= 0:
        problems.append(f"serve_timeout must be positive, got {settings.serve_timeout}")
    if settings.serve_url is not None and not settings.serve_url.startswith(
        ("http://", "https://")
    ):
        problems.append(
            f"serve_url must be an http:// or https:// URL of a pgkb serve, got "
            f"{settings.serve_url!r}"
        )
    if settings.embedding_dims < 1:
        problems.append(f"embedding_dims must be positive, got {settings.embedding_dims}")
    if settings.chunk_tokens is not None and settings.chunk_tokens < 16:
        problems.append(f"chunk_tokens must be at least 16, got {settings.chunk_tokens}")
    chunk_tokens = settings.chunk_tokens or DEFAULT_CHUNK_TOKENS
    if not 0 <= settings.chunk_overlap < chunk_tokens:
        problems.append(
            f"chunk_overlap must be >= 0 and below chunk_tokens ({chunk_tokens}), "
            f"got {settings.chunk_overlap}"
        )
    if settings.embedding_max_input_tokens is not None and settings.embedding_max_input_tokens < 1:
        problems.append(
            "embedding_max_input_tokens must be positive, got "
            f"{settings.embedding_max_input_tokens}"
        )
    if settings.rerank_provider != "off" and not settings.rerank_model:
        problems.append(
            f"rerank_provider is {settings.rerank_provider!r} but no rerank_model is set "
            "(PGKB_RERANK_MODEL)"
        )
    if settings.rerank_provider == "api" and not settings.rerank_base_url:
        problems.append(
            "rerank_provider is 'api' but no rerank_base_url is set (PGKB_RERANK_BASE_URL)"
        )
    if not 1 <= settings.rerank_candidates <= 1000:
        problems.append(
            f"rerank_candidates must be between 1 and 1000, got {settings.rerank_candidates}"
        )
    if settings.rerank_timeout <= 0:
        problems.append(f"rerank_timeout must be positive, got {settings.rerank_timeout}")
    if settings.rerank_max_retries < 0:
        problems.append(f"rerank_max_retries must be >= 0, got {settings.rerank_max_retries}")
    for name in ("vector_candidates", "keyword_candidates", "rrf_k", "match_count"):
        if getattr(settings, name) < 1:
            problems.append(f"{name} must be at least 1, got {getattr(settings, name)}")
    for name in ("vector_weight", "keyword_weight", "exact_keyword_weight"):
        if getattr(settings, name) < 0:
            problems.append(f"{name} must be >= 0, got {getattr(settings, name)}")
    if not 0 <= settings.keyword_confidence <= 100:
        problems.append(
            f"keyword_confidence must be between 0 and 100, got {settings.keyword_confidence}"
        )
    if not 0 <= settings.lead_slot <= 1000:
        problems.append(f"lead_slot must be between 0 and 1000, got {settings.lead_slot}")
    if settings.max_per_document is not None and settings.max_per_document < 1:
        problems.append(f"max_per_document must be at least 1, got {settings.max_per_document}")
    if settings.chat_timeout <= 0:
        problems.append(f"chat_timeout must be positive, got {settings.chat_timeout}")
    if settings.chat_deadline <= 0:
        problems.append(f"chat_deadline must be positive, got {settings.chat_deadline}")
    if settings.chat_max_retries < 0:
        problems.append(f"chat_max_retries must be >= 0, got {settings.chat_max_retries}")
    if settings.chat_context_tokens < 1024:
        problems.append(
            f"chat_context_tokens must be at least 1024, got {settings.chat_context_tokens}"
        )
    if not 1 <= settings.agent_max_steps <= 20:
        problems.append(f"agent_max_steps must be between 1 and 20, got {settings.agent_max_steps}")
    if settings.embedding_batch_size < 1:
        problems.append(
            f"embedding_batch_size must be at least 1, got {settings.embedding_batch_size}"
        )
    if settings.embedding_max_retries < 0:
        problems.append(f"embedding_max_retries must be >= 0, got {settings.embedding_max_retries}")
    if settings.embedding_timeout <= 0:
        problems.append(f"embedding_timeout must be positive, got {settings.embedding_timeout}")
    try:
        parse_filters(settings.search_filters)
    except ConfigError as exc:
        problems.append(exc.message)
    if settings.hnsw_m is not None and not 2 <= settings.hnsw_m <= 100:
        problems.append(f"hnsw_m must be between 2 and 100, got {settings.hnsw_m}")
    if settings.hnsw_ef_construction is not None and not (
        max(4, 2 * (settings.hnsw_m or 16)) <= settings.hnsw_ef_construction <= 1000
    ):
        problems.append(
            "hnsw_ef_construction must be between 2 * hnsw_m and 1000, "
            f"got {settings.hnsw_ef_construction}"
        )
    if settings.hnsw_ef_search is not None and not 1 <= settings.hnsw_ef_search <= 1000:
        problems.append(f"hnsw_ef_search must be between 1 and 1000, got {settings.hnsw_ef_search}")
    if settings.hnsw_bulk_threshold < 0:
        problems.append(
            "hnsw_bulk_threshold must be 0 (always maintain the HNSW index row by row) or "
            f"a positive number of embeddings, got {settings.hnsw_bulk_threshold}"
        )
    if not 0 <= settings.stale_days <= 36500:
        problems.append(f"stale_days must be from 0 (never) to 36500, got {settings.stale_days}")
    if settings.max_file_mb <= 0:
        problems.append(f"max_file_mb must be positive, got {settings.max_file_mb}")
    if not 0.05 <= settings.worker_poll_seconds <= 3600:
        problems.append(
            f"worker_poll_seconds must be from 0.05 to 3600, got {settings.worker_poll_seconds}"
        )
    if not 10 <= settings.worker_lease_seconds <= 86400:
        problems.append(
            f"worker_lease_seconds must be from 10 to 86400, got {settings.worker_lease_seconds}"
        )
    if not 1 <= settings.worker_max_attempts <= 100:
        problems.append(
            f"worker_max_attempts must be from 1 to 100, got {settings.worker_max_attempts}"
        )
    if not 0 <= settings.worker_backoff_base <= settings.worker_backoff_max <= 86400:
        problems.append(
            "worker_backoff_base and worker_backoff_max must be 0 <= base <= max <= 86400, got "
            f"{settings.worker_backoff_base} and {settings.worker_backoff_max}"
        )
    if settings.max_text_mb <= 0:
        problems.append(f"max_text_mb must be positive, got {settings.max_text_mb}")
    if settings.extract_timeout <= 0:
        problems.append(f"extract_timeout must be positive, got {settings.extract_timeout}")
    if settings.extract_memory_mb < 200:
        problems.append(
            "extract_memory_mb must be at least 200 (the parsers need about 100 MB), "
            f"got {settings.extract_memory_mb}"
        )
    if settings.web_timeout <= 0:
        problems.append(f"web_timeout must be positive, got {settings.web_timeout}")
    if settings.web_max_pages < 1:
        problems.append(f"web_max_pages must be at least 1, got {settings.web_max_pages}")
    for name in ("web_deadline", "web_robots_max_kb", "web_sitemap_max_mb"):
        if getattr(settings, name) <= 0:
            problems.append(f"{name} must be positive, got {getattr(settings, name)}")
    if settings.web_max_links < 0:
        problems.append(f"web_max_links must be >= 0, got {settings.web_max_links}")
    try:
        origin_list(settings.web_allowed_origins)
    except ConfigError as exc:
        problems.append(exc.message)
    if not settings.web_user_agent.strip():
        problems.append("web_user_agent must not be empty")
    if not 0 <= settings.prune_max_fraction <= 1:
        problems.append(
            f"prune_max_fraction must be between 0 and 1, got {settings.prune_max_fraction}"
        )
    if settings.embedding_provider not in ("local", "openai"):
        problems.append(
            f"embedding_provider must be 'local' or 'openai', got {settings.embedding_provider!r}"
        )
    try:
        collection_names(settings.collections)
    except ConfigError as exc:
        problems.append(exc.message)
    problems += token_problems(settings.serve_token)
    problems += token_problems(settings.serve_write_token, "serve_write_token")
    write_token = settings.serve_write_token
    if write_token is not None and write_token == settings.serve_token:
        problems.append(
            "serve_write_token is the same as serve_token: every reader could write; give "
            "writers a token of their own"
        )
    if settings.serve_max_upload < 1024:
        problems.append(
            f"serve_max_upload must be at least 1024 bytes, got {settings.serve_max_upload}"
        )
    return problems


def number_problems(settings: Any) -> list[str]:
    """Every number must be finite (NaN passes every ``< 0`` test and makes every score NaN)
    and every integer must fit a PostgreSQL ``integer``, which the database is given."""
    problems = []
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{field.name} must be a finite number, got {value}")
        elif isinstance(value, int) and not -PG_INT_MAX - 1 <= value <= PG_INT_MAX:
            problems.append(
                f"{field.name} must be at most {PG_INT_MAX:,} in size (a PostgreSQL "
                f"integer), got {value}"
            )
    return problems


def token_problems(token: str | None, name: str = "serve_token") -> list[str]:
    """A bearer token travels in an HTTP header: surrounding whitespace is stripped by every
    client and server, and only visible ASCII is sent as it is; such a token could never
    authenticate. (The token itself is never shown.)"""
    if token is None:
        return []
    if not token.strip():
        return [f"{name} is empty or only whitespace: set a real token, or unset it"]
    if token != token.strip():
        return [
            f"{name} starts or ends with whitespace (a newline from a file?); no "
            "client can send it: strip it"
        ]
    bad = next((i for i, c in enumerate(token) if not "!" <= c <= "~"), None)
    if bad is not None:
        return [
            f"{name} has a character that is not visible ASCII (at position {bad + 1}: "
            "a space, a control or a non-ASCII character), which an HTTP header cannot "
            "carry as it is; use letters, digits and punctuation, e.g. "
            "`openssl rand -hex 24`"
        ]
    return []
