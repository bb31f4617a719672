"""Hostile input, property-based (hypothesis): parsers, the chunker, the search functions and the
CLI on arbitrary text, bytes, query strings, filter JSON and file names.

Every generated case is counted (``CASES``) and the counts are printed at the end of the module
(``pytest -s``) for RELIABILITY.md. max_examples stays modest so the module runs in CI time.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.answer.abstention import compute_signals
from loader.cli import cli
from loader.errors import SqlState
from loader.ingest.extract import Extracted, ExtractionError, extract
from loader.safety import parse_int, printable, redact
from tests.fake_openai import FakeOpenAI
from tests.helpers import Corpus, check_whole, ingest_settings, load_golden, settings_env

CASES: collections.Counter[str] = collections.Counter()

FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

NASTY = [
    "'; DROP TABLE kb.documents; --",
    '" OR 1=1 --',
    "/* comment */ vacuum",
    "a\\b\\\\c\\'",
    "$$ $q$ $$",
    "%s %(x)s {} {0}",
    "!!! & | <-> :* ''",
    "-- line comment",
    "'\"",
    "\u202e\u200b\ufeff",
    "\U0001f600 \u00e9 \u4e2d\u6587",
    # psql's output pasted into a search: a run of dashes once parsed as 40 nested NOTs
    "SELECT ARRAY[1,2] FROM arr; array ------------------------------------------ {1,2}",
    "a " + "- " * 200,
    "vacuum " + "-" * 5000 + " memory",
]
# search syntax in any arrangement: quotes, or, negation, parentheses, operators of tsquery
operator_soup = st.lists(
    st.sampled_from(["-", "--", " ", '"', "or", "OR", "(", ")", "!", "&", "|", ":*", "vacuum"]),
    max_size=120,
).map("".join)
nasty_text = st.one_of(st.sampled_from(NASTY), st.text(max_size=300), operator_soup)
no_nul_text = nasty_text.map(lambda s: s.replace("\x00", ""))


@pytest.fixture(scope="module", autouse=True)
def _report_counts() -> Iterator[None]:
    yield
    print("\nhypothesis cases run:", dict(sorted(CASES.items())), "total", sum(CASES.values()))


# --- parsers and the chunker -------------------------------------------------------------------


@pytest.fixture(scope="module")
def chunker() -> Any:
    from loader.ingest.chunking import Chunker
    from loader.providers.local import LocalEmbedder

    return Chunker(LocalEmbedder(), 40, 0, embed_heading_path=False)


@FAST
@given(text=st.text(max_size=2000))
def test_the_chunker_covers_any_text(chunker: Any, text: str) -> None:
    from loader.ingest.extract import Section

    CASES["chunker"] += 1
    chunks = chunker.chunk("T", [Section(("H",), text)])
    joined = "".join("".join(c.content.split()) for c in chunks)
    assert joined == "".join(text.split())
    assert [c.index for c in chunks] == list(range(len(chunks)))


@FAST
@given(
    data=st.one_of(
        st.binary(max_size=3000),
        st.text(max_size=2000).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.sampled_from(
            [b"%PDF-1.7\n", b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF", b"<html><", b"#"]
        ),
    ),
    suffix=st.sampled_from([".md", ".txt", ".html", ".pdf"]),
)
def test_the_parsers_never_crash_on_arbitrary_bytes(data: bytes, suffix: str) -> None:
    CASES["parsers"] += 1
    try:
        result = extract(data, Path("x" + suffix))
    except ExtractionError:
        return
    assert isinstance(result, Extracted)
    for section in result.sections:
        assert "\x00" not in section.text or suffix == ".html"


@FAST
@given(value=st.one_of(st.text(max_size=5000), st.integers(), st.floats(), st.booleans()))
def test_the_tool_argument_int_parser_never_raises(value: Any) -> None:
    CASES["parse_int"] += 1
    got = parse_int(value)
    assert got is None or isinstance(got, int)
    if isinstance(value, str) and got is not None:
        assert value.strip().lstrip("+-").isascii()


def test_the_int_parser_refuses_what_int_cannot_take() -> None:
    assert parse_int("²") is None  # '²'.isdigit() is True, int('²') raises
    assert parse_int("7" * 4300) is None
    assert parse_int(" 12 ") == 12 and parse_int("-3") == -3
    assert parse_int(True) is None and parse_int(2.0) == 2 and parse_int(2.5) is None


@FAST
@given(text=st.text(max_size=500))
def test_printable_and_redact_never_raise(text: str) -> None:
    CASES["printable/redact"] += 1
    shown = printable(text)
    assert "\x1b" not in shown and "\x07" not in shown
    redact(text)


# --- the search functions in SQL --------------------------------------------------------------


@pytest.fixture
def golden(conn: psycopg.Connection[Any]) -> Corpus:
    return load_golden(conn)


ALLOWED_SQLSTATES = {SqlState.INVALID_ARGUMENT, "22P05"}  # pgkb's, untranslatable_character

json_values = st.recursive(
    # JSON has no NaN or Infinity (json.dumps would write them; PostgreSQL rightly refuses them)
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | nasty_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(nasty_text, inner, max_size=4),
    max_leaves=10,
)
filters = st.one_of(
    st.dictionaries(
        st.sampled_from(["category", "metadata", "source", "other"]), json_values, max_size=3
    ),
    json_values,
)


@FAST
@given(query=no_nul_text, filter_json=filters)
def test_hybrid_search_takes_any_query_and_filter(
    conn: psycopg.Connection[Any], golden: Corpus, query: str, filter_json: Any
) -> None:
    CASES["hybrid_search query+filters"] += 1
    conn.execute("SET ROLE kb_reader")
    try:
        conn.execute(
            "SELECT * FROM kb.hybrid_search(%s, '[0,0,1]', 10, filters => %s::jsonb)",
            (query, json.dumps(filter_json)),
        ).fetchall()
        conn.execute("SELECT * FROM kb.keyword_search(%s)", (query,)).fetchall()
    except psycopg.Error as exc:
        assert exc.sqlstate in ALLOWED_SQLSTATES, (exc.sqlstate, exc)
    finally:
        conn.rollback()
    # the tables are intact whatever the text
    assert conn.execute("SELECT count(*) FROM kb.chunks").fetchone() == (len(golden.ids),)
    conn.rollback()


def test_megabyte_queries_and_injection_strings(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    conn.execute("SET ROLE kb_reader")
    for query in [*NASTY, "vacuum " * 150_000, "x" * 1_000_000, '"' * 100_000]:
        CASES["hybrid_search fixed"] += 1
        conn.execute("SELECT * FROM kb.hybrid_search(%s, '[0,0,1]')", (query,)).fetchall()
        conn.execute("SELECT * FROM kb.search_query(%s)", (query,)).fetchall()
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM kb.chunks").fetchone() == (len(golden.ids),)


@FAST
@given(
    question=st.one_of(
        no_nul_text,
        st.from_regex(r"[\w\s()+\-/.'\u03b2\U0010ffff]{0,80}", fullmatch=True).map(
            lambda s: s.replace("\x00", "")
        ),
    )
)
def test_the_abstention_signals_take_any_question(
    conn: psycopg.Connection[Any], golden: Corpus, question: str
) -> None:
    """Names, abbreviations, separators, marker signs and any script: the gate's name checks
    (loader.answer.abstention) answer for every question text and never raise."""
    CASES["abstention signals"] += 1
    signals = compute_signals(conn, question, [])
    assert signals["unknown_names"] == len(signals["unknown_name_list"])
    conn.rollback()


def test_the_abstention_signals_take_edge_names(
    conn: psycopg.Connection[Any], golden: Corpus
) -> None:
    for question in (
        "Is \U0010ffffabcdef known?",
        "(WFR)",
        "()",
        "a (bb) (CC-1) ((x))",
        "+++ --- TRAP+ -derived- x-",
        "Does Z\u03b2\u03b3\u03b4-class (Z\u03b2) work?",
    ):
        CASES["abstention signals fixed"] += 1
        signals = compute_signals(conn, question, [])
        assert signals["unknown_names"] == len(signals["unknown_name_list"]), question
        conn.rollback()


# --- the CLI ------------------------------------------------------------------------------------


@pytest.fixture
def ingested(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> dict[str, str]:
    from loader.ingest.pipeline import ingest_paths

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Vacuum\n\nVacuum reclaims storage occupied by dead tuples.\n")
    settings_ = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings_, [root])
    return settings_env(settings_)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(query=nasty_text.filter(lambda s: s.strip() != ""))
def test_the_cli_search_takes_any_query(ingested: dict[str, str], query: str) -> None:
    CASES["cli search"] += 1
    result = CliRunner().invoke(cli, ["search", "--json", "--", query], env=ingested)
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output


def test_file_names_with_spaces_newlines_and_bad_bytes(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    import os

    from loader.ingest.pipeline import ingest_paths

    root = tmp_path / "docs"
    root.mkdir()
    names = [
        b"with space.md",
        b"new\nline.md",
        b"tab\there.md",
        b"quote'\"; DROP TABLE kb.documents; --.md",
        b"percent_%_under.md",
        "caf\u00e9 \u4e2d\u6587.md".encode(),
        b"latin1-caf\xe9.md",  # not valid UTF-8
    ]
    for raw in names:
        with open(os.path.join(os.fsencode(root), raw), "wb") as handle:
            handle.write(b"# Title\n\nSome text about vacuum and storage.\n")
    report = ingest_paths(ingest_settings(db_url, tmp_path, fake_openai), [root], prune=True)
    CASES["file names"] += len(names)
    failed = {f["source"]: f["reason"] for f in report.failed}
    assert report.new == len(names) - 1, report.to_dict()
    (reason,) = failed.values()
    assert "not valid UTF-8" in reason
    json.dumps(report.to_dict(), ensure_ascii=False).encode("utf-8")  # printable as --json
    stored = {r[0] for r in conn.execute("SELECT source_uri FROM kb.documents")}
    conn.rollback()
    assert str(root / "new\nline.md") in stored
    check_whole(conn)
