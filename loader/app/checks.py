"""What any caller may send, checked before any work: the limits, written once, and the checks
of each number, text argument, document id, embedding input, collection name and the lone
surrogates JSON can carry. A wrong argument is a :class:`BadRequest` (a usage error on the
command line, HTTP 400, an MCP tool error) that names it and what is accepted.

The requests of :mod:`loader.app.requests` are built with these; the MCP tools' input schemas
state the same bounds (``le=MAX_SEARCH_LIMIT``), so a client reads them before calling.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from loader.answer.tools import MAX_GRAPH_DEPTH, MAX_GRAPH_LIMIT
from loader.errors import ConfigError, PgkbError
from loader.filters import check_collection

__all__ = ["MAX_GRAPH_DEPTH", "MAX_GRAPH_LIMIT"]  # the reader agent's bounds, the same for all

MAX_SEARCH_LIMIT = 50
MAX_LIST_LIMIT = 1000
LIST_LIMIT = 200
READ_TOKENS = 4000
MAX_READ_TOKENS = 20_000
MIN_READ_TOKENS = 200
MAX_NEIGHBOURS = 10
MAX_EMBED_INPUTS = 256
MAX_QUERY_CHARS = 4000
MAX_CALL_COLLECTIONS = 100


class BadRequest(PgkbError):
    """An argument the caller can fix (HTTP 400, an MCP tool error)."""


class Forbidden(PgkbError):
    """The caller's role may not do this (HTTP 403): write into a collection it was not granted."""


class NotFound(BadRequest):
    """What the call names does not exist (HTTP 404): a document, a job."""


def bounded_int(name: str, value: int | None, low: int, high: int, default: int) -> int:
    """``value`` (``default`` when None), an integer from ``low`` to ``high``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be from {low} to {high}, got {value}")
    return value


def surrogate_path(value: Any, path: str = "") -> str | None:
    """Where in a decoded JSON value a string holds a lone surrogate (``"\\ud800"`` is valid
    JSON, but no Unicode text, so neither the model nor PostgreSQL can take it): ``query``,
    ``input[3]``, ``metadata.team``; None when there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "the value"
        return None
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), k, v) for k, v in value.items())
        for where, key, item in items:
            found = surrogate_path(key, where) or surrogate_path(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = surrogate_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


def text_argument(name: str, value: Any, limit: int = MAX_QUERY_CHARS) -> str:
    """``value`` stripped: a non-empty string of at most ``limit`` characters, all text."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be a non-empty string")
    if len(value) > limit:
        raise BadRequest(f"{name} is {len(value)} characters long; at most {limit} are accepted")
    if surrogate_path(value, name):
        raise BadRequest(f"{name} holds a lone surrogate (\\ud800-\\udfff), which is not text")
    return value.strip()


def embedding_inputs(texts: Sequence[Any]) -> None:
    """``/v1/embeddings``' ``input``: 1 to :data:`MAX_EMBED_INPUTS` non-empty strings, all text
    (token arrays are not accepted)."""
    if not texts:
        raise BadRequest("input is empty: give a string or a list of strings")
    if len(texts) > MAX_EMBED_INPUTS:
        raise BadRequest(f"at most {MAX_EMBED_INPUTS} inputs per request, got {len(texts)}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(f"input[{i}] must be a string (token arrays are not accepted)")
        if not text:
            raise BadRequest(f"input[{i}] is an empty string")
        if surrogate_path(text):
            raise BadRequest(f"input[{i}] holds a lone surrogate (\\ud800-\\udfff)")


def call_collections(collections: Sequence[str] | None, served: Sequence[str]) -> tuple[str, ...]:
    """A call's ``collections``: valid names, each once, within the ``served`` ones (all when
    none are served); empty when the call names none."""
    if collections is None:
        return ()
    if isinstance(collections, str) or not isinstance(collections, Sequence):
        raise BadRequest('collections must be a list of collection names, e.g. ["hr"]')
    if len(collections) > MAX_CALL_COLLECTIONS:
        raise BadRequest(f"collections may name at most {MAX_CALL_COLLECTIONS} collections")
    try:
        names = tuple(dict.fromkeys(check_collection(c, where="collections") for c in collections))
    except ConfigError as exc:
        raise BadRequest(exc.message) from None
    outside = [n for n in names if served and n not in served]
    if outside:
        raise BadRequest(
            f"this server serves collections {', '.join(served)}; {', '.join(outside)} "
            "is not available",
            hint="leave collections out, or start another server for that collection",
        )
    return names


def parse_document_ids(values: Sequence[Any] | None) -> list[str] | None:
    """Document ids as text, each checked to be a UUID (:class:`BadRequest` otherwise)."""
    if not values:
        return None
    out = []
    for value in values:
        try:
            out.append(str(uuid.UUID(str(value))))
        except ValueError:
            raise BadRequest(f"document id {value!r} is not a UUID") from None
    return out


def collections_hint(names: Sequence[str]) -> str:
    """What a client asking for a collection it may not read can do, in its own terms (an agent
    or a service runs no command line): the collections it may ask for."""
    return (
        f"the collections this server may read: {', '.join(names) or 'none'}; name one of "
        "them, or leave collections out"
    )
