"""What narrows a search, as one frozen value from the command line to SQL.

:class:`SearchFilters` holds the keys ``kb.search_filters`` takes (``category``, ``metadata``,
``source``, ``collections``). ``pgkb search``/``ask`` build one from ``--category``, ``--meta``,
``--source`` and ``--collection``; the ``search_filters`` setting (a JSON object) is parsed into
one once; :func:`loader.search.search` merges the two and sends :meth:`SearchFilters.to_json` to
SQL, which validates it again.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
from collections.abc import Mapping
from typing import Any

from loader.errors import ConfigError

KEYS = ("category", "metadata", "source", "collections")

DEFAULT_COLLECTION = "default"
"""The collection of documents ingested without ``--collection``."""
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def check_collection(name: str, *, where: str = "--collection") -> str:
    """``name`` when it is a valid collection name (what ``kb.collections`` accepts), else a
    :class:`ConfigError` saying what a name may hold."""
    if not isinstance(name, str) or not _COLLECTION_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: {name!r} is not a collection name; use 1 to 63 letters, digits, '_', '.' "
            "or '-', starting with a letter or digit"
        )
    return name


@dataclasses.dataclass(frozen=True)
class SearchFilters:
    """Only documents of ``category`` (any of them), whose metadata contains ``metadata``,
    whose ``source_uri`` matches the LIKE pattern ``source`` and that belong to one of
    ``collections``; unset parts do not filter (no collections: every collection the database
    role may read, which the database enforces whatever is asked)."""

    category: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    source: str | None = None
    collections: tuple[str, ...] = ()

    def __post_init__(self) -> None:  # a read-only copy: the value cannot change under a caller
        object.__setattr__(self, "metadata", types.MappingProxyType(dict(self.metadata)))
        object.__setattr__(self, "collections", tuple(dict.fromkeys(self.collections)))

    @classmethod
    def of(
        cls,
        *,
        category: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        collections: tuple[str, ...] | list[str] = (),
    ) -> SearchFilters:
        return cls(
            (category,) if category else (),
            metadata or {},
            source,
            tuple(check_collection(c) for c in collections),
        )

    @classmethod
    def parse(cls, value: str | Mapping[str, Any] | None, *, where: str) -> SearchFilters:
        """Filters from a JSON object (text or parsed), with an error naming ``where`` they
        came from and what is wrong."""
        if value is None or value == "":
            return cls()
        data: object = value
        if isinstance(value, str):
            try:
                data = json.loads(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: search filters are not valid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: search filters must be a JSON object, got {value!r}")
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown filter key(s) {', '.join(unknown)}; valid keys are: "
                + ", ".join(KEYS)
            )
        category = data.get("category")
        categories = [category] if isinstance(category, str) else category or []
        if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
            raise ConfigError(f"{where}: category must be a string or a list of strings")
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise ConfigError(f"{where}: metadata must be a JSON object")
        source = data.get("source")
        if source is not None and not isinstance(source, str):
            raise ConfigError(f"{where}: source must be a string (a LIKE pattern)")
        collection = data.get("collections")
        collections = [collection] if isinstance(collection, str) else collection or []
        if not isinstance(collections, list) or not all(isinstance(c, str) for c in collections):
            raise ConfigError(f"{where}: collections must be a string or a list of strings")
        names = tuple(check_collection(c, where=where) for c in collections)
        return cls(tuple(categories), metadata, source, names)

    def merged(self, other: SearchFilters | None) -> SearchFilters:
        """These filters with ``other``'s on top: its category, source and collections replace
        these, its metadata keys are added (and win)."""
        if other is None:
            return self
        return SearchFilters(
            other.category or self.category,
            {**self.metadata, **other.metadata},
            other.source if other.source is not None else self.source,
            other.collections or self.collections,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``kb.search_filters`` reads (only the parts that are set)."""
        data: dict[str, Any] = {}
        if self.category:
            data["category"] = self.category[0] if len(self.category) == 1 else list(self.category)
        if self.metadata:
            data["metadata"] = dict(self.metadata)
        if self.source is not None:
            data["source"] = self.source
        if self.collections:
            data["collections"] = list(self.collections)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def __bool__(self) -> bool:
        return bool(self.category or self.metadata or self.source is not None or self.collections)
