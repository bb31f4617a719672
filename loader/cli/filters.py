"""The search filters ``pgkb search`` and ``pgkb ask`` share: ``--source``, ``--meta``,
``--collection`` (with ``--category``, one :class:`~loader.filters.SearchFilters` value) and
``--min-similarity`` (a setting override)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from loader.cli.ingest import parse_meta
from loader.filters import SearchFilters

F = TypeVar("F", bound=Callable[..., Any])


def collection_option(func: F) -> F:
    """Add ``--collection`` (repeatable) to a command: its ``collections`` argument."""
    return click.option(
        "--collection",
        "collections",
        multiple=True,
        metavar="NAME",
        help="Only documents of this collection (repeatable: any of them); default: every "
        "collection the database role may read.",
    )(func)


def joined(collections: tuple[str, ...]) -> str | None:
    """``--collection`` values as the ``collections`` setting (None when none was given)."""
    return ",".join(collections) or None


def filter_options(func: F) -> F:
    """Add ``--source``, ``--meta``, ``--collection`` and ``--min-similarity`` to a command."""
    func = collection_option(func)
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


def search_filters(
    category: str | None,
    source_pattern: str | None,
    meta_filters: tuple[str, ...],
    collections: tuple[str, ...] = (),
) -> SearchFilters:
    """The filters the options ask for, as the one value the search takes to SQL."""
    return SearchFilters.of(
        category=category,
        metadata=parse_meta(meta_filters),
        source=source_pattern,
        collections=collections,
    )
