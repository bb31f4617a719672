"""`pgkb eval` end to end on tiny corpora with the real local model, and its input errors."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from tests.helpers import with_dbname

DOCS = {
    "vacuum.md": "# Vacuum\n\nVACUUM reclaims storage occupied by dead tuples. Autovacuum runs it "
    "in the background so tables do not bloat after many updates and deletes.\n",
    "copy.md": "# Copy\n\nCOPY moves data between PostgreSQL tables and files. The FORCE_QUOTE "
    "option quotes every non-NULL value in CSV output.\n",
    "locks.md": "# Deadlocks\n\nWhen two transactions each hold a lock the other one waits for, "
    "PostgreSQL detects the deadlock and aborts one of them.\n",
}

QUESTIONS = [
    {"id": "e1", "question": "What does FORCE_QUOTE do?", "kind": "exact", "sources": ["copy.md"]},
    {
        "id": "p1",
        "question": "Two sessions wait on each other forever; what happens?",
        "kind": "paraphrase",
        "sources": ["locks.md"],
    },
    {
        "id": "c1",
        "question": "Why do tables grow after updates and how is the space reclaimed?",
        "kind": "conceptual",
        "sources": ["vacuum.md"],
    },
    {
        "id": "u1",
        "question": "How do I configure replication in MongoDB?",
        "kind": "unanswerable",
        "sources": [],
    },
    {
        "id": "u2",
        "question": "How does Cassandra compact its SSTables?",
        "kind": "unanswerable",
        "sources": [],
    },
]


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in DOCS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return corpus, questions


def _run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


@pytest.mark.model
def test_eval_questions_json_report_and_calibration(
    tiny: tuple[Path, Path], cli_env: dict[str, str], db_url: str, embedder: Any
) -> None:
    corpus, questions = tiny
    args = ["eval", "--questions", str(questions), "--corpus", str(corpus), "--json"]
    result = _run([*args, "--calibrate"], cli_env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["documents"] == 3
    assert report["questions"] == 5 and report["unanswerable"] == 2
    for mode in ("vector", "keyword", "hybrid"):
        assert report["retrievers"][mode]["overall"]["queries"] == 3
    # every document comes back from a 3-document corpus, so recall@5 proves nothing: the rank
    # of each question's page does (first, through the vector leg and the fusion)
    rows = {row["id"]: row for row in report["per_question"]}
    for qid, page in (("e1", "copy.md"), ("p1", "locks.md"), ("c1", "vacuum.md")):
        for mode in ("vector", "hybrid"):
            assert rows[qid][mode]["ranks"] == {page: 1}, (qid, mode, rows[qid][mode])
    assert rows["e1"]["keyword"]["top"] == ["copy.md"]  # FORCE_QUOTE is on that page only
    assert report["retrievers"]["hybrid"]["overall"]["mrr@10"] == 1.0
    assert "no reranker" in report["reranked"]
    assert report["abstention"]["rule_source"] == "calibrated"
    assert report["abstention"]["unanswerable_flagged"] == 1.0  # MongoDB, Cassandra
    assert report["abstention"]["answerable_flagged"] == 0.0
    assert {row["id"] for row in report["per_question"]} == {q["id"] for q in QUESTIONS}
    with psycopg.connect(db_url) as conn:
        stored = conn.execute("SELECT value FROM kb.settings WHERE key = 'abstention'").fetchone()
    assert stored is not None and stored[0]["clauses"]
    assert "ingesting" in result.stderr and "evaluated 5/5" in result.stderr

    # a re-run reuses the ingestion and prints the table
    again = _run(args[:-1], cli_env)
    assert again.exit_code == 0, again.output
    assert "unchanged 3" in again.stderr
    assert "hybrid" in again.stdout and "recall@5" in again.stdout
    assert "abstention rule (calibrated)" in again.stdout


@pytest.mark.model
def test_eval_beir_uses_its_own_database(
    tmp_path: Path, cli_env: dict[str, str], db_url: str, pg_url: str, embedder: Any
) -> None:
    name = f"tiny_{uuid.uuid4().hex[:6]}"
    folder = tmp_path / name
    folder.mkdir()
    corpus = [{"_id": f"d{i}", "title": name.split(".")[0], "text": text} for i, (name, text) in
              enumerate(DOCS.items())]  # fmt: skip
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps(doc) + "\n" for doc in corpus), encoding="utf-8"
    )
    (folder / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "what reclaims dead tuples"}\n'
        '{"_id": "q2", "text": "quote every value in CSV"}\n',
        encoding="utf-8",
    )
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td1\t1\n", encoding="utf-8"
    )
    database = f"pgkb_beir_{name}_all_minilm_l6_v2_384"
    try:
        result = _run(["eval", "--beir", str(folder), "--json"], cli_env)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["database"] == database
        assert report["queries"] == 2 and report["documents"] == 3
        # both claims find their abstract first (recall@5 would be 1.0 for any order)
        assert report["retrievers"]["hybrid"]["overall"]["mrr@10"] == 1.0
        assert [row["hybrid"]["ranks"] for row in report["per_query"]] == [{"d0": 1}, {"d1": 1}]
        # its database is made as pgkb db upgrade makes one: with the pg_textsearch keyword
        # backend where the server loads it (the SQL BM25 otherwise), and says which serves
        with psycopg.connect(with_dbname(pg_url, database)) as beir:
            loaded = beir.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_settings WHERE name LIKE 'pg\\_textsearch.%')"
            ).fetchone()
            serving = beir.execute("SELECT kb.keyword_backend()").fetchone()
        assert serving == (("pg_textsearch",) if loaded and loaded[0] else ("sql",))
        assert f"keyword backend: {serving[0] if serving else '?'} (" in result.stderr
        # the user's knowledge base got nothing
        with psycopg.connect(db_url) as conn:
            count = conn.execute("SELECT count(*) FROM kb.documents").fetchone()
        assert count is not None and count[0] == 0
        again = _run(["eval", "--beir", str(folder)], cli_env)
        assert again.exit_code == 0, again.output
        assert "embedded 0 chunks" in again.stderr
        assert "BEIR" in again.stdout
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--questions", "{missing}"], "does not exist"),
        (["--beir", "{tmp}", "--calibrate"], "cannot be combined"),
        (["--beir", "{tmp}"], "no corpus.jsonl"),
    ],
)
def test_eval_input_errors_are_clear(
    tmp_path: Path, cli_env: dict[str, str], args: list[str], message: str
) -> None:
    filled = [a.format(missing=tmp_path / "nope.json", tmp=tmp_path) for a in args]
    result = _run(["eval", *filled], cli_env)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_calibrate_without_unanswerable_questions_says_so(
    tiny: tuple[Path, Path], cli_env: dict[str, str], tmp_path: Path
) -> None:
    corpus, _ = tiny
    questions = tmp_path / "answerable.json"
    questions.write_text(json.dumps(QUESTIONS[:3]), encoding="utf-8")
    result = _run(
        ["eval", "--questions", str(questions), "--corpus", str(corpus), "--calibrate"], cli_env
    )
    assert result.exit_code == 2
    assert "calibration needs both" in result.stderr


@pytest.mark.model
def test_the_eval_gate_end_to_end_through_the_cli(
    tiny: tuple[Path, Path], cli_env: dict[str, str], embedder: Any, tmp_path: Path
) -> None:
    """`pgkb eval --record-baseline`, then a run where a question's page is gone: `--check-
    baseline` exits 1 naming it, and `--record-baseline` refuses to lower the baseline unless
    given a reason."""
    corpus, questions = tiny
    baseline = tmp_path / "baseline.json"
    args = ["eval", "--questions", str(questions), "--corpus", str(corpus)]
    gate = ["--baseline", str(baseline)]
    recorded = _run([*args, "--record-baseline", *gate], cli_env)
    assert recorded.exit_code == 0, recorded.output
    before = baseline.read_text()
    passed = _run([*args, "--check-baseline", *gate], cli_env)
    assert passed.exit_code == 0, passed.output

    # the page that answers e1 (FORCE_QUOTE) loses that text: a lower run
    (corpus / "copy.md").write_text("# Copy\n\nThis page now talks about something else.\n")
    lower = _run([*args, "--check-baseline", *gate], cli_env)
    assert lower.exit_code == 1, lower.output
    assert "e1" in lower.output
    refused = _run([*args, "--record-baseline", *gate], cli_env)
    assert refused.exit_code == 1, refused.output
    assert "--accept-lower" in refused.output
    assert baseline.read_text() == before  # not lowered
    accepted = _run(
        [*args, "--record-baseline", *gate, "--accept-lower", "page rewritten"], cli_env
    )
    assert accepted.exit_code == 0, accepted.output
    assert "page rewritten" in baseline.read_text()
