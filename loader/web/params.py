"""A page's address checked: its query parameters (numbers in a range, text of a bounded length,
one of a few choices, document ids) and where to go after signing in. A wrong one is a
:class:`PageError`, shown as the page's error with what to do."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request

MAX_QUERY = 2000
"""The longest question or search the pages take, in characters."""


class PageError(Exception):
    """A page that cannot be shown: its status, a title and what to do."""

    def __init__(self, status: int, title: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.status, self.title, self.message, self.hint = status, title, message, hint


def query_int(request: Request, name: str, low: int, high: int, default: int | None) -> int | None:
    """Query parameter ``name``: a whole number from ``low`` to ``high`` (``default`` when
    absent or blank)."""
    raw = request.query_params.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise PageError(400, "Bad address", f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise PageError(400, "Bad address", f"{name} must be from {low} to {high}, got {value}")
    return value


def query_text(request: Request, name: str, limit: int = MAX_QUERY) -> str | None:
    """Query parameter ``name`` stripped, at most ``limit`` characters (None when blank)."""
    raw = request.query_params.get(name)
    if raw is None or not raw.strip():
        return None
    if len(raw) > limit:
        raise PageError(400, "Bad address", f"{name} is longer than {limit} characters")
    return raw.strip()


def query_choice(request: Request, name: str, allowed: Sequence[str], default: str | None) -> Any:
    """Query parameter ``name``: one of ``allowed`` (``default`` when absent)."""
    raw = query_text(request, name, 100)
    if raw is None:
        return default
    if raw not in allowed:
        raise PageError(
            400, "Bad address", f"{name} must be one of {', '.join(allowed)}, got {raw!r}"
        )
    return raw


def parse_uuid(value: str, what: str = "document id") -> str:
    """``value`` as a UUID's text; not one: a 404, no such document."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise PageError(404, "No such document", f"{value!r} is not a {what}") from None


def safe_next(value: str | None) -> str:
    """A path on this server to go back to after signing in (never another site's)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(c in value for c in "\r\n\\"):
        return "/"
    return value


def search_form(request: Request) -> dict[str, Any]:
    """The search page's form from its address: the query, mode, limit and filters."""
    meta_raw = query_text(request, "meta", 1000)
    metadata: dict[str, str] | None = None
    if meta_raw:
        metadata = {}
        for item in meta_raw.split(","):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise PageError(
                    400, "Bad filter", f"metadata filter {item.strip()!r} is not key=value",
                    "write key=value, several separated by commas: team=hr, year=2024",
                )  # fmt: skip
            metadata[key.strip()] = value.strip()
    similarity_raw = query_text(request, "min_similarity", 20)
    similarity = None
    if similarity_raw is not None:
        try:
            similarity = float(similarity_raw)
        except ValueError:
            raise PageError(
                400, "Bad filter", f"minimum similarity must be a number, got "
                f"{similarity_raw!r}",
            ) from None  # fmt: skip
    doc = query_text(request, "doc", 100)
    return {
        "q": query_text(request, "q") or "",
        "mode": query_choice(request, "mode", ("hybrid", "vector", "keyword"), "hybrid"),
        "limit": query_int(request, "limit", 1, 50, 10),
        "category": query_text(request, "category", 200),
        "collection": query_text(request, "collection", 200),
        "source": query_text(request, "source", 1000),
        "meta": meta_raw or "",
        "metadata": metadata,
        "min_similarity": similarity,
        "min_similarity_raw": similarity_raw or "",
        "doc": parse_uuid(doc) if doc else None,
    }


def ask_form(request: Request) -> dict[str, Any]:
    """The ask page's form from its address: the question, category and collection."""
    return {
        "q": query_text(request, "q") or "",
        "category": query_text(request, "category", 200),
        "collection": query_text(request, "collection", 200),
    }
