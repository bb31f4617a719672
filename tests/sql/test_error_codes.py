"""pgkb's SQL functions raise with pgkb's own SQLSTATE codes, and Python maps codes to errors.

Every code of :class:`loader.errors.SqlState` is raised here for real by the function that raises
it and checked by its code, then mapped by :func:`loader.errors.database_error` to its kind; the
SQL files raise nothing else, and no code is one PostgreSQL knows.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from loader.devtools.reference import raised_by
from loader.errors import SQLSTATES, ModelMismatchError, PgkbError, SqlState, database_error
from loader.resources import function_files
from tests.helpers import raises_code

# --- the codes ----------------------------------------------------------------------------------


STATEMENT = re.compile(r"RAISE EXCEPTION(?:'(?:[^']|'')*'|[^';])*;")
"""A RAISE EXCEPTION statement, to its semicolon (quoted strings may hold one)."""


def test_every_raise_in_sql_functions_uses_one_of_pgkbs_codes() -> None:
    raises = 0
    for name, text in function_files().items():
        for statement in STATEMENT.findall(text):
            raises += 1
            code = re.search(r"USING ERRCODE = '(\w+)'", statement)
            assert code is not None, f"{name}: a RAISE without ERRCODE: {statement[:80]}"
            assert code.group(1) in set(SqlState), f"{name}: {code.group(1)} is not pgkb's"
        assert not re.search(r"\bRAISE\s+(?!EXCEPTION|NOTICE|WARNING|INFO|LOG|DEBUG)", text), name
    assert raises >= len(SqlState)
    # and every code is raised somewhere: none is listed for nothing
    assert set(raised_by()) == set(SqlState)


def test_the_codes_are_pgkbs_own() -> None:
    """Class PK: five characters, no category code (xx000), none that PostgreSQL (psycopg's map
    of every PostgreSQL SQLSTATE) knows, and the class itself unknown to it."""
    assert set(SQLSTATES) == set(SqlState)
    for code in SqlState:
        assert re.fullmatch(r"PK[0-9A-Z]{3}", code.value) and not code.value.endswith("000")
        with pytest.raises(KeyError):
            psycopg.errors.lookup(code.value)
    with pytest.raises(KeyError):
        psycopg.errors.lookup("PK000")


def test_a_code_that_is_not_pgkbs_maps_to_nothing() -> None:
    class Other(Exception):
        sqlstate = "22023"  # PostgreSQL's invalid_parameter_value

    assert database_error(Other("x")) is None
    assert database_error(ValueError("PK001")) is None  # the text is never read


# --- each code raised for real --------------------------------------------------------------------

DOC = "INSERT INTO kb.documents (source_uri, title, content_sha) VALUES ('a', 'A', 'x')"
CHUNK = """
INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count)
SELECT id, 0, 'text', 'sha', 1 FROM kb.documents WHERE source_uri = 'a'
"""
TWO_MODELS = [
    "SELECT kb.register_model('a', 3, 'test')",
    "SELECT kb.register_model('b', 4, 'test')",
]

CASES: dict[SqlState, tuple[list[str], str, str]] = {
    # code: (setup statements, the call, a word of the message)
    SqlState.INVALID_ARGUMENT: ([], "SELECT * FROM kb.hybrid_search('x', rrf_k => -1)", "rrf_k"),
    SqlState.MODEL_NOT_REGISTERED: ([], "SELECT kb.activate_model('nope', 3)", "not registered"),
    SqlState.NO_MODEL: ([], "SELECT * FROM kb.vector_search('[1,0,0]')", "no embedding model"),
    SqlState.DIMENSION_MISMATCH: (
        TWO_MODELS[:1],
        "SELECT * FROM kb.vector_search('[1,0]')",
        "2 dimensions",
    ),
    SqlState.MODEL_NOT_READY: (
        [*TWO_MODELS, DOC, CHUNK],
        "SELECT kb.activate_model('b', 4)",
        "no embedding of it",
    ),
    SqlState.MODEL_IN_USE: (TWO_MODELS, "SELECT kb.drop_model('a')", "active model"),
    SqlState.NOT_FOUND: ([], "SELECT kb.ingest_run_end(999, '{}')", "no ingestion run"),
    SqlState.COLLECTION_NOT_READABLE: (
        [],
        'SELECT * FROM kb.search_filters(\'{"collections": ["nope"]}\')',
        "no collection",
    ),
    SqlState.COLLECTION_NOT_WRITABLE: (
        [
            "CREATE ROLE pk031_reader",
            "GRANT kb_reader TO pk031_reader",
            "SET SESSION AUTHORIZATION pk031_reader",
        ],
        "SELECT kb.submit_document('a.md', 'A', 'text')",
        "may not write into collection",
    ),
    SqlState.KEYWORD_BACKEND_UNAVAILABLE: (
        ["SET pgkb.keyword_backend = 'pg_textsearch'"],
        "SELECT kb.keyword_backend()",
        "extension is not installed",
    ),
}


def test_every_code_has_a_case() -> None:
    assert set(CASES) == set(SqlState)


@pytest.mark.parametrize("code", list(CASES), ids=lambda c: f"{c.value}-{c.name.lower()}")
def test_the_code_is_raised_and_mapped_to_its_kind(
    conn: psycopg.Connection[Any], code: SqlState
) -> None:
    setup, call, word = CASES[code]
    for statement in setup:
        conn.execute(statement.encode())
    with raises_code(code, match=word) as caught:
        conn.execute(call.encode())
    conn.rollback()
    error = database_error(caught.value)
    kind, _meaning = SQLSTATES[code]
    assert error is not None and type(error) is kind and error.sqlstate == code
    assert error.message == caught.value.diag.message_primary
    assert error.hint == caught.value.diag.message_hint


def test_the_kinds_are_the_ones_python_decides_by() -> None:
    """A model the database does not know, or of other dimensions, is a ModelMismatchError (the
    search turns it into the model hint); everything else is a plain PgkbError."""
    mismatch = {c for c, (kind, _) in SQLSTATES.items() if kind is ModelMismatchError}
    assert mismatch == {SqlState.MODEL_NOT_REGISTERED, SqlState.DIMENSION_MISMATCH}
    assert all(issubclass(kind, PgkbError) for kind, _ in SQLSTATES.values())
