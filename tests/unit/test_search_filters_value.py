"""``SearchFilters``: one frozen value from the command line to SQL (no JSON round trip through
the settings)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from loader.cli.filters import search_filters
from loader.errors import ConfigError
from loader.filters import SearchFilters
from loader.settings import load_settings


def test_options_make_one_value_sql_reads() -> None:
    filters = search_filters("manual", "%/sql-%", ("team=db", "lang=en"))
    assert json.loads(filters.to_json()) == {
        "category": "manual",
        "metadata": {"team": "db", "lang": "en"},
        "source": "%/sql-%",
    }
    assert not search_filters(None, None, ())
    assert search_filters(None, None, ()).to_json() == "{}"


def test_the_value_is_frozen() -> None:
    filters = SearchFilters.of(metadata={"team": "db"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        filters.source = "%"  # type: ignore[misc]
    with pytest.raises(TypeError):
        filters.metadata["team"] = "ops"  # type: ignore[index]


def test_options_go_on_top_of_the_setting() -> None:
    setting = load_settings(
        env={"PGKB_SEARCH_FILTERS": '{"category": ["a", "b"], "metadata": {"team": "db"}}'},
        database_url="postgresql://h/kb",
    ).filters()
    assert setting.category == ("a", "b")
    merged = setting.merged(SearchFilters.of(metadata={"lang": "en"}, source="%.md"))
    assert merged.to_dict() == {
        "category": ["a", "b"],
        "metadata": {"team": "db", "lang": "en"},
        "source": "%.md",
    }
    assert merged.merged(SearchFilters.of(category="c")).category == ("c",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"tag": "x"}', "valid keys are: category, metadata, source"),
        ("[1]", "must be a JSON object"),
        ("{not json", "not valid JSON"),
        ('{"source": 3}', "source must be a string"),
        ('{"category": [1]}', "category must be a string or a list"),
    ],
)
def test_a_bad_setting_is_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env={"PGKB_SEARCH_FILTERS": text}, database_url="postgresql://h/kb")
