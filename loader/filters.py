"""What narrows a search, as one frozen value from the command line to SQL.

:class:`SearchFilters` holds the keys ``kb.search_filters`` takes (``category``, ``metadata``,
``source``). ``pgkb search``/``ask`` build one from ``--category``, ``--meta`` and ``--source``; the
``search_filters`` setting (a JSON object) is parsed into one once; :func:`loader.search.search`
merges the two and sends :meth:`SearchFilters.to_json` to SQL, which validates it again.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping
from typing import Any

from loader.errors import ConfigError

KEYS = ("category", "metadata", "source")


@dataclasses.dataclass(frozen=True)
class SearchFilters:
    """Only documents of ``category`` (any of them), whose metadata contains ``metadata`` and
    whose ``source_uri`` matches the LIKE pattern ``source``; unset parts do not filter."""

    category: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    source: str | None = None

    def __post_init__(self) -> None:  # a read-only copy: the value cannot change under a caller
        object.__setattr__(self, "metadata", types.MappingProxyType(dict(self.metadata)))

    @classmethod
    def of(
        cls,
        *,
        category: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
    ) -> SearchFilters:
        return cls((category,) if category else (), metadata or {}, source)

    @classmethod
    def parse(cls, value: str | Mapping[str, Any] | None, *, where: str) -> SearchFilters:
        """Filters from a JSON object (text or parsed), with an error naming ``where`` they
        came from and what is wrong."""
        if value is None or value == "":
            return cls()
        data: Any = value
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
        return cls(tuple(categories), metadata, source)

    def merged(self, other: SearchFilters | None) -> SearchFilters:
        """These filters with ``other``'s on top: its category and source replace these, its
        metadata keys are added (and win)."""
        if other is None:
            return self
        return SearchFilters(
            other.category or self.category,
            {**self.metadata, **other.metadata},
            other.source if other.source is not None else self.source,
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
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def __bool__(self) -> bool:
        return bool(self.category or self.metadata or self.source is not None)
