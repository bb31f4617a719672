"""Numbers at the edges (second review): ``PGKB_MATCH_COUNT=99999999999`` ended in a traceback
(integer out of range in PostgreSQL); NaN and infinite weights passed both the settings check
and the SQL ``< 0`` test (NaN is not below 0), so every score was NaN and the order arbitrary.
Non-finite values are refused in the settings and in SQL; integers must fit PostgreSQL's.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.errors import ConfigError, SqlState
from loader.settings import load_settings
from tests.helpers import load_golden, raises_code


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("VECTOR_WEIGHT", "nan"),
        ("KEYWORD_WEIGHT", "inf"),
        ("EXACT_KEYWORD_WEIGHT", "-Infinity"),
        ("MIN_SIMILARITY", "NaN"),
        ("EXTRACT_TIMEOUT", "nan"),
        ("CHAT_DEADLINE", "inf"),
        ("MAX_FILE_MB", "nan"),
        ("PRUNE_MAX_FRACTION", "nan"),
        ("MATCH_COUNT", "99999999999"),
        ("RRF_K", "2147483648"),
        ("VECTOR_CANDIDATES", "-99999999999"),
    ],
)
def test_settings_refuse_non_finite_and_out_of_range_numbers(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={f"PGKB_{name}": value})
    assert name.lower() in info.value.message, info.value.message


def test_the_largest_postgresql_integer_is_accepted() -> None:
    assert load_settings(env={"PGKB_RRF_K": "2147483647"}).rrf_k == 2147483647


@pytest.mark.parametrize(
    "env",
    [{"PGKB_MATCH_COUNT": "99999999999"}, {"PGKB_VECTOR_WEIGHT": "nan"}],
    ids=["match_count", "nan_weight"],
)
def test_the_cli_names_the_bad_number(cli_env: dict[str, str], env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["search", "vacuum", "--mode", "keyword"], env=cli_env | env)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert next(iter(env)).removeprefix("PGKB_").lower() in result.output


SQL_CALLS = [
    "SELECT count(*) FROM kb.hybrid_search('vacuum', NULL, vector_weight => 'NaN')",
    "SELECT count(*) FROM kb.hybrid_search('vacuum', NULL, keyword_weight => 'Infinity')",
    "SELECT count(*) FROM kb.hybrid_search('vacuum', NULL, exact_keyword_weight => 'NaN')",
    "SELECT count(*) FROM kb.hybrid_search('vacuum', NULL, vector_weight => '-Infinity')",
    "SELECT count(*) FROM kb.keyword_search('vacuum', bm25_k1 => 'NaN')",
    "SELECT count(*) FROM kb.keyword_search('vacuum', bm25_k1 => 'Infinity')",
    "SELECT count(*) FROM kb.keyword_search('vacuum', bm25_b => 'NaN')",
    "SELECT count(*) FROM kb.keyword_search('vacuum', heading_weight => 'Infinity')",
]


@pytest.mark.parametrize("query", SQL_CALLS)
def test_sql_refuses_non_finite_weights(conn: psycopg.Connection[Any], query: str) -> None:
    conn.execute("INSERT INTO kb.documents (source_uri, title, content_sha) VALUES ('a', 'A', 'x')")
    with raises_code(SqlState.INVALID_ARGUMENT, match="finite"):
        conn.execute(query)
    conn.rollback()


def test_finite_weights_still_search(conn: psycopg.Connection[Any]) -> None:
    """The largest finite weights pass the check and still rank: on the golden corpus, a huge
    vector weight with no keyword weight orders by the vector leg (chunks 1, 2 first for
    [1,0,0]), a huge keyword weight with no vector by the keyword leg (the two VACUUM chunks),
    every score finite and positive."""
    corpus = load_golden(conn)
    vector_led = conn.execute(
        "SELECT chunk_id, score FROM kb.hybrid_search('vacuum', '[1,0,0]', vector_weight => 1e308,"
        " keyword_weight => 0)"
    ).fetchall()
    keyword_led = conn.execute(
        "SELECT chunk_id, score FROM kb.hybrid_search('vacuum', NULL, vector_weight => 0,"
        " keyword_weight => 1e308)"
    ).fetchall()
    ids = corpus.ids
    assert [r[0] for r in vector_led[:2]] == [ids[0], ids[1]], vector_led
    assert len(vector_led) == 5, vector_led
    assert [r[0] for r in keyword_led] == [ids[4], ids[2]], keyword_led
    for _chunk, score in vector_led + keyword_led:
        assert math.isfinite(score) and score > 0, (vector_led, keyword_led)
