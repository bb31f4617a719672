"""The search filters ``pgkb search`` and ``pgkb ask`` share: ``--source``, ``--meta``,
``--min-similarity`` (the filters kb.hybrid_search takes), as setting overrides."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def filter_options(func: F) -> F:
    """Add ``--source``, ``--meta`` and ``--min-similarity`` to a command."""
    func = click.option(
        "--min-similarity",
        type=click.FloatRange(-1, 1),
        default=None,
        help="Drop vector hits whose cosine similarity is below this.",
    )(func)
    func = click.option(
        "--meta",
        "meta_filters",
        multiple=True,
        metavar="KEY=VALUE",
        help="Only documents whose metadata has KEY=VALUE (repeatable: all must hold).",
    )(func)
    func = click.option(
        "--source",
        "source_pattern",
        metavar="PATTERN",
        help="Only documents whose source_uri matches this LIKE pattern ('%' any text).",
    )(func)
    return func


def filter_settings(
    source_pattern: str | None, meta_filters: tuple[str, ...], min_similarity: float | None
) -> dict[str, Any]:
    """Setting overrides (``app.settings(**...)``) for the given filter options."""
    from loader.cli.ingest import parse_meta

    filters: dict[str, Any] = {}
    if source_pattern is not None:
        filters["source"] = source_pattern
    if meta_filters:
        filters["metadata"] = parse_meta(meta_filters)
    return {
        "search_filters": json.dumps(filters) if filters else None,
        "min_similarity": min_similarity,
    }
