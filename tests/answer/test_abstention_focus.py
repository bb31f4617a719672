"""The gate's ``focus_coverage`` signal: the question's rarest words, held by the best passages
or met by a near word of theirs; and ``pgkb ask`` saying "I don't know" to a plain-word question
on a small handbook while answering a paraphrase (real local model)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.answer.abstention import compute_signals, decide
from loader.answer.abstention.focus import (
    FOCUS_WORDS,
    MAX_PASSAGE_WORDS,
    focus_coverage,
    focus_words,
    general_rank,
    passage_words,
    question_words,
)
from loader.answer.prompt import IDK
from loader.cli import cli
from loader.settings import Settings
from tests.helpers import create_database, drop_database, load_chunks

# --- pure parts ---------------------------------------------------------------------------


def _lexemes(words: Sequence[str], stop: Sequence[str] = ()) -> dict[str, list[str]]:
    return {w: ([] if w.lower() in stop else [w.lower()]) for w in words}


def test_the_focus_is_the_rarest_content_words_in_english() -> None:
    words = question_words("Do we have a company choir that I'm allowed to join?")
    assert "I'm" in words and "choir" in words
    focus = focus_words(words, _lexemes(words, stop=("do", "we", "have", "a", "that", "to")))
    assert len(focus) == FOCUS_WORDS
    assert focus[0] == "choir"  # rarer in English than company, allowed or join
    assert "i'm" not in focus  # contractions are never the focus
    assert general_rank("choir") > general_rank("company") > general_rank("the")
    # stop words (no lexeme) and words under three letters are never the focus
    assert focus_words(["is", "it", "ok"], {"is": [], "it": [], "ok": ["ok"]}) == []


def test_passage_words_skip_the_commonest_and_keep_the_rarest() -> None:
    text = "The cycle to work scheme: the company lends staff a bicycle, which they repay."
    found = passage_words([text])
    assert "the" not in found and "which" not in found
    assert {"bicycle", "cycle", "scheme", "repay"} <= set(found)
    assert found.index("bicycle") < found.index("company")  # rarest first
    many = " ".join(f"word{chr(97 + i % 26)}{chr(97 + i // 26)}x" for i in range(300))
    assert len(passage_words([many])) == MAX_PASSAGE_WORDS


def _fake_embed(table: dict[str, list[float]], calls: list[Sequence[str]]) -> Any:
    def embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(list(texts))
        return [table.get(t, [0.0, 0.0, 1.0]) for t in texts]

    return embed


def test_focus_coverage_counts_held_words_and_the_nearest_passage_word() -> None:
    calls: list[Sequence[str]] = []
    embed = _fake_embed({"bike": [1.0, 0.0, 0.0], "bicycle": [0.6, 0.8, 0.0]}, calls)
    # every focus word held: 1.0, and nothing is embedded
    assert focus_coverage(["scheme", "work"], {"scheme": True, "work": True}, ["x"], embed) == 1.0
    assert calls == []
    # "bike" is not held; its best passage word is "bicycle" (cosine 0.6); "scheme" is held
    value = focus_coverage(
        ["bike", "scheme"], {"bike": False, "scheme": True}, ["the bicycle scheme"], embed
    )
    w_bike, w_scheme = math.log(2 + general_rank("bike")), math.log(2 + general_rank("scheme"))
    assert value == pytest.approx((0.6 * w_bike + 1.0 * w_scheme) / (w_bike + w_scheme))
    assert len(calls) == 1 and calls[0][0] == "bike"  # one batch: the missing word, then words
    # a missing word and no way to embed, or nothing to compare with: no signal
    assert focus_coverage(["bike"], {"bike": False}, ["the bicycle"], None) is None
    assert focus_coverage(["bike"], {"bike": False}, [""], embed) is None
    assert focus_coverage([], {}, ["the bicycle"], embed) is None


# --- in the database ----------------------------------------------------------------------

CHUNKS = [
    ("leave.md", "Annual leave", "Every employee gets twenty five days of paid annual leave."),
    ("leave.md", "Sick leave", "Tell your manager before ten if you are too ill to work."),
    ("travel.md", "Cycle scheme", "The cycle to work scheme lends staff money for a bicycle."),
]


def _load(conn: psycopg.Connection[Any]) -> list[int]:
    return load_chunks(conn, CHUNKS)


def _hit(chunk_id: int, heading: str, content: str) -> dict[str, Any]:
    return {
        "chunk_id": chunk_id,
        "score": 0.03,
        "vector_similarity": 0.5,
        "vector_rank": 1,
        "keyword_rank": 1,
        "heading_path": heading,
        "content": content,
    }


def test_compute_signals_measures_focus_coverage(conn: psycopg.Connection[Any]) -> None:
    ids = _load(conn)
    hits = [_hit(i, h, c) for i, (_u, h, c) in zip(ids, CHUNKS, strict=True)]
    calls: list[Sequence[str]] = []
    embed = _fake_embed({"choir": [1.0, 0.0, 0.0], "bicycle": [0.3, 0.0, 0.9]}, calls)

    # every focus word is held by a passage: 1.0 without embedding anything
    held = compute_signals(conn, "How many days of paid annual leave?", hits, embed=embed)
    assert held["focus_coverage"] == 1.0 and calls == []
    assert len(held["focus_words"]) == 3 and all(held["focus_words"].values())

    # "choir" is in no passage: its nearest passage word decides, and the reason names it
    signals = compute_signals(conn, "Is there a company choir?", hits, embed=embed)
    assert signals["focus_words"]["choir"] is False
    assert 0 < signals["focus_coverage"] < 1
    assert calls and calls[0][0] == "choir"
    from loader.answer.abstention import AbstentionRule, Condition

    rule = AbstentionRule(((Condition("focus_coverage", "<", 0.99),),))
    decision = decide(conn, Settings(), "Is there a company choir?", hits, rule=rule, embed=embed)
    assert decision.abstain and "choir" in decision.reason, decision.reason

    # the default rule reads no focus_coverage: the gate embeds nothing for it
    calls.clear()
    decide(conn, Settings(), "Is there a company choir?", hits, embed=embed)
    assert calls == []

    # without the embedder the signal is not measured, and a clause on it never fires
    assert compute_signals(conn, "Is there a company choir?", hits)["focus_coverage"] is None
    assert not decide(conn, Settings(), "Is there a company choir?", hits, rule=rule).abstain


def test_a_failing_embedder_leaves_the_signal_unmeasured(conn: psycopg.Connection[Any]) -> None:
    from loader.errors import PgkbError

    ids = _load(conn)
    hits = [_hit(i, h, c) for i, (_u, h, c) in zip(ids, CHUNKS, strict=True)]

    def broken(texts: Sequence[str]) -> list[list[float]]:
        raise PgkbError("the embedding server is down")

    signals = compute_signals(conn, "Is there a company choir?", hits, embed=broken)
    assert signals["focus_coverage"] is None and signals["focus_words"]["choir"] is False


# --- with the real local model ------------------------------------------------------------


@pytest.mark.model
def test_a_synonym_in_the_passage_covers_the_focus(embedder: Any) -> None:
    passage = ["Cycle to work scheme: the company lends you money to buy a bicycle."]
    bike = focus_coverage(["bike"], {"bike": False}, passage, embedder.embed)
    choir = focus_coverage(["choir"], {"choir": False}, passage, embedder.embed)
    assert bike is not None and choir is not None
    assert bike > 0.6 > choir, (bike, choir)


HANDBOOK = {
    "leave.md": [
        (
            "Annual leave",
            "Every employee receives twenty five days of paid annual leave in "
            "each leave year, plus the public holidays of the country they work in.",
        ),
        (
            "Carrying over leave",
            "Up to five unused days of annual leave may be carried into the "
            "next leave year; anything beyond that is lost on the first of January.",
        ),
        (
            "Booking leave",
            "Book leave in the HR portal at least two weeks ahead and wait for "
            "your line manager to approve the request before making travel plans.",
        ),
        (
            "Sick leave",
            "If you are too ill to work, call your line manager before ten in the "
            "morning on the first day and keep them informed every day after that.",
        ),
        (
            "Fit notes",
            "Absences longer than seven calendar days need a fit note from a doctor, "
            "sent to HR within three working days of the eighth day of absence.",
        ),
        (
            "Parental leave",
            "Parents with one year of service may take up to eighteen weeks of "
            "unpaid parental leave for each child before the child turns eighteen.",
        ),
    ],
    "expenses.md": [
        (
            "Claiming expenses",
            "Submit expense claims in the finance portal within thirty days "
            "of spending the money, with an itemised receipt attached to every line.",
        ),
        (
            "Meals when travelling",
            "When travelling for work you may claim up to twenty five "
            "pounds a day for meals, or forty pounds when you stay away overnight.",
        ),
        (
            "Mileage",
            "Using your own car for business journeys is repaid at forty five pence "
            "a mile for the first ten thousand miles in a tax year.",
        ),
        (
            "Hotels",
            "Book hotels through the travel desk; the nightly limit is one hundred and "
            "twenty pounds in London and ninety pounds anywhere else.",
        ),
        (
            "Client entertainment",
            "Entertaining a client needs prior approval from your "
            "director and must not exceed sixty pounds per head including drinks.",
        ),
        (
            "Company cards",
            "Company credit cards are issued to staff who travel often; personal "
            "spending on a company card is a disciplinary matter.",
        ),
    ],
    "it.md": [
        (
            "Passwords",
            "Passwords must be at least fourteen characters long and must never be "
            "shared, written down or reused on websites outside the company.",
        ),
        (
            "Two step sign in",
            "Every account uses two step sign in with the authenticator app; "
            "ask the service desk to reset it when you replace your phone.",
        ),
        (
            "Lost laptops",
            "Report a lost or stolen laptop to the service desk at once so that "
            "it can be locked and wiped remotely before anyone reads its data.",
        ),
        (
            "Phishing",
            "Forward suspicious emails to the security team and do not click their "
            "links; a real request from finance never asks you to change bank details.",
        ),
        (
            "Software",
            "Only software from the company catalogue may be installed; anything else "
            "needs approval from the security team after a review of its licence.",
        ),
        (
            "Working remotely",
            "Staff may work from home up to three days a week using the "
            "company VPN; working from abroad needs written approval from HR.",
        ),
    ],
    "conduct.md": [
        (
            "Dress code",
            "Office staff dress smartly when meeting clients; warehouse staff wear "
            "safety boots and the high visibility vest issued on their first day.",
        ),
        (
            "Gifts",
            "Gifts from suppliers worth more than fifty pounds must be declared to "
            "compliance and may have to be returned or donated to charity.",
        ),
        (
            "Grievances",
            "Raise a grievance in writing with your manager's manager; a hearing is "
            "held within ten working days and you may bring a colleague.",
        ),
        (
            "Whistleblowing",
            "Concerns about fraud or danger can be reported in confidence to the "
            "ethics line, and nobody is punished for raising one in good faith.",
        ),
        (
            "Probation",
            "New starters serve a six month probation with reviews after the first, "
            "third and sixth months before their employment is confirmed.",
        ),
        (
            "Notice periods",
            "After probation the notice period is one month for most staff and "
            "three months for managers, given in writing on either side.",
        ),
    ],
}


@pytest.fixture(scope="module")
def handbook_env(
    pg_url: str, template_db: str, embedder: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A 24-section staff handbook ingested with the real model (its similarity profile is
    measured at ingestion: every section is long enough to give a pseudo-query), as the
    environment of a ``pgkb`` command."""
    import uuid

    from loader.ingest.pipeline import ingest_paths

    folder = tmp_path_factory.mktemp("handbook")
    for name, sections in HANDBOOK.items():
        text = "\n\n".join(
            f"## {heading}\n\n{body} This rule on {heading.lower()} applies at every office "
            "and warehouse site, to permanent staff and contractors alike."
            for heading, body in sections
        )
        (folder / name).write_text(f"# {Path(name).stem.title()}\n\n{text}\n", encoding="utf-8")
    db = f"pgkb_handbook_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, db, template=template_db)
    data = tmp_path_factory.mktemp("data")
    try:
        settings = Settings(database_url=url, data_dir=data)
        report = ingest_paths(settings, [folder], embedder=embedder)
        assert report.exit_code == 0, report.to_dict()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT kb.similarity_profile()").fetchone() != (None,)
        yield {"PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(data)}
    finally:
        drop_database(pg_url, db)


@pytest.mark.model
def test_ask_says_i_dont_know_to_a_plain_word_question_and_answers_a_paraphrase(
    handbook_env: dict[str, str],
) -> None:
    runner = CliRunner()
    # plain words, no name: the handbook has no choir, nor anything near one
    result = runner.invoke(cli, ["ask", "Do we have a company choir?"], env=handbook_env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == IDK, result.stdout
    assert "Closest passages (closest, not an answer):" in lines
    # a paraphrase of "Carrying over leave", in other words than the page's
    result = runner.invoke(
        cli, ["ask", "can i keep holiday i didn't take for next year"], env=handbook_env
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] != IDK, result.stdout
    assert "Up to five unused days of annual leave" in result.stdout  # the right passage
