"""The evaluation's parts that need no model: question files, BEIR reading, scoring, calibration."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from loader.answer.abstention import AbstentionRule, Condition
from loader.errors import PgkbError
from loader.evaluation.beir import BeirFormatError, load_beir
from loader.evaluation.calibrate import Sample, calibrate, rule_rates
from loader.evaluation.questions import (
    KINDS,
    default_holdout_file,
    default_questions_file,
    label_ranking,
    load_questions,
    source_matches,
    unmatched_sources,
)
from loader.evaluation.runner import (
    EvalQuery,
    aggregate,
    dedupe_documents,
    per_query,
    ranked_documents,
    run_queries,
)
from loader.resources import sample_corpus_dir
from loader.settings import load_settings

# --- question files ---------------------------------------------------------------------------


def _page_text(name: str) -> str:
    from bs4 import BeautifulSoup

    html = (sample_corpus_dir() / name).read_text(encoding="utf-8")
    text = BeautifulSoup(html, "html.parser").get_text(" ")
    return re.sub(r"\s+", " ", text).lower()


@pytest.mark.parametrize("path", [default_questions_file(), default_holdout_file()])
def test_bundled_questions_are_grounded_in_the_sample_corpus(path: Path) -> None:
    """Every source exists, and its page holds the recorded evidence for the answer."""
    questions = load_questions(path)
    raw = {item["id"]: item for item in json.loads(path.read_text(encoding="utf-8"))}
    pages = {p.name for p in sample_corpus_dir().glob("*.html")}
    for q in questions:
        for source in q.sources:
            assert source in pages, f"{q.id}: {source} is not in the sample corpus"
            evidence = raw[q.id]["evidence"].lower()
            assert evidence in _page_text(source), f"{q.id}: {evidence!r} not in {source}"


def test_bundled_question_mix() -> None:
    questions = load_questions(default_questions_file())
    counts = {kind: sum(q.kind == kind for q in questions) for kind in KINDS}
    assert len(questions) >= 40
    assert counts["unanswerable"] >= 8
    # the sample's pages are answered one at a time; multipage questions are the whole-manual
    # sets' kind
    assert min(n for kind, n in counts.items() if kind != "multipage") >= 10, counts
    holdout = load_questions(default_holdout_file())
    assert not {q.question for q in holdout} & {q.question for q in questions}


def test_unanswerable_names_never_occur_in_the_corpus() -> None:
    """The names the unanswerable questions hinge on appear on no bundled page."""
    corpus = " ".join(_page_text(p.name) for p in sample_corpus_dir().glob("*.html"))
    for name in (
        "postgres_fdw",
        "pg_cron",
        "crosstab",
        "lo_import",
        "alter system",
        "lateral",
        "mysql",
        "patroni",
        "pg_rewind",
        "unaccent",
        "hstore",
        "pgbouncer",
        "pg_checksums",
        "at time zone",
        "grouping sets",
        "data guard",
    ):
        assert name not in corpus, name


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "non-empty JSON list"),
        ('[{"id": "a", "question": "q", "kind": "odd", "sources": []}]', "'kind' must be one of"),
        ('[{"id": "a", "question": "q", "kind": "exact", "sources": []}]', "needs at least one"),
        ('[{"id": "a", "question": "q", "kind": "unanswerable", "sources": ["x"]}]', "no sources"),
        ('[{"id": "a", "question": "", "kind": "exact", "sources": ["x"]}]', "'question'"),
        (
            '[{"id": "a", "question": "q", "kind": "multipage", "sources": ["x", "x"]}]',
            "multipage question needs at least two sources",
        ),
        (
            '[{"id": "a", "question": "q", "kind": "exact", "sources": ["x"]},'
            ' {"id": "a", "question": "r", "kind": "exact", "sources": ["x"]}]',
            "duplicate id",
        ),
    ],
)
def test_bad_question_file_names_file_and_problem(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "q.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PgkbError, match=message) as info:
        load_questions(path)
    assert str(path) in info.value.message
    with pytest.raises(PgkbError, match="does not exist"):
        load_questions(tmp_path / "missing.json")


def test_source_matching_by_path_suffix() -> None:
    assert source_matches("sql-createindex.html", "/any/dir/sql-createindex.html")
    assert source_matches("sql-createindex.html", "file:///any/dir/sql-createindex.html")
    assert source_matches("sql-createindex.html", "sql-createindex.html")
    assert source_matches("dir/a.html", "/x/dir/a.html")
    assert not source_matches("sql-createindex.html", "/d/old-sql-createindex.html")
    assert not source_matches("123", "5123")
    assert label_ranking(["/x/a.html", "/x/b.html"], ["b.html"]) == ["/x/a.html", "b.html"]
    questions = load_questions(default_questions_file())
    assert (
        unmatched_sources(questions, ["/x/" + p.name for p in sample_corpus_dir().glob("*")]) == []
    )
    assert "pgtrgm.html" in unmatched_sources(questions, ["/x/sql-copy.html"])


# --- BEIR -------------------------------------------------------------------------------------


def _write_beir(folder: Path, qrels_path: str = "qrels.tsv") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "Cats", "text": "Cats purr."}\n'
        '{"_id": "d2", "title": "", "text": "Dogs bark."}\n',
        encoding="utf-8",
    )
    (folder / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "why do cats purr"}\n{"_id": "q2", "text": "unjudged"}\n',
        encoding="utf-8",
    )
    qrels = folder / qrels_path
    qrels.parent.mkdir(parents=True, exist_ok=True)
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n", encoding="utf-8")


def test_beir_reading(tmp_path: Path) -> None:
    _write_beir(tmp_path / "My-Set")
    data = load_beir(tmp_path / "My-Set")
    assert data.name == "my_set"
    assert data.queries == {"q1": "why do cats purr"}
    assert data.qrels == {"q1": {"d1": 1}}
    docs = list(data.documents())
    assert [d.id for d in docs] == ["d1", "d2"]
    assert docs[1].title == ""
    assert data.corpus_size() == 2
    _write_beir(tmp_path / "split", "qrels/test.tsv")
    assert load_beir(tmp_path / "split").qrels_file.name == "test.tsv"


def test_beir_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(BeirFormatError, match="is not a folder"):
        load_beir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BeirFormatError, match=r"no corpus\.jsonl"):
        load_beir(tmp_path / "empty")
    _write_beir(tmp_path / "bad")
    (tmp_path / "bad" / "qrels.tsv").unlink()
    with pytest.raises(BeirFormatError, match="no relevance judgements"):
        load_beir(tmp_path / "bad")
    _write_beir(tmp_path / "bad2")
    (tmp_path / "bad2" / "corpus.jsonl").write_text('{"_id": "x"}\nnot json\n', encoding="utf-8")
    with pytest.raises(BeirFormatError, match=r"corpus.jsonl, line 2"):
        list(load_beir(tmp_path / "bad2").documents())


# --- scoring ----------------------------------------------------------------------------------


def test_chunk_hits_dedupe_to_documents_and_fill_ten() -> None:
    calls: list[int] = []
    chunks = [{"source_uri": f"/d/{i // 4}.html"} for i in range(100)]  # 4 chunks per document

    def retrieve(text: str, emb: Any, mode: str, limit: int) -> list[dict[str, str]]:
        calls.append(limit)
        return chunks[:limit]

    docs, first = ranked_documents(retrieve, "q", [0.0], "hybrid", 20)
    assert docs == [f"/d/{i}.html" for i in range(10)]
    assert calls == [20, 40]
    assert len(first) == 20
    assert dedupe_documents([{"source_uri": "a"}, {"source_uri": "a"}, {"source_uri": "b"}]) == [
        "a",
        "b",
    ]


def test_run_queries_scores_per_mode_and_kind() -> None:
    settings = load_settings(env={}, database_url="postgresql://unused/db")
    ranking = {
        "vector": ["/c/a.html", "/c/b.html"],
        "keyword": ["/c/b.html", "/c/a.html"],
        "hybrid": ["/c/x.html"],
    }

    def retrieve(text: str, emb: Any, mode: str, limit: int) -> list[dict[str, str]]:
        return [{"source_uri": uri} for uri in ranking[mode]]

    queries = [
        EvalQuery("1", "q one", "exact", {"a.html": 1}),
        EvalQuery("2", "q two", "paraphrase", {"b.html": 1}),
        EvalQuery("3", "q three", "unanswerable", {}),
    ]
    results = run_queries(
        None,  # type: ignore[arg-type]  # not used without abstention
        settings,
        queries,
        embed_query=lambda text: [0.0],
        retrieve=retrieve,
        k=1,
        abstention=False,
    )
    table = aggregate(results, 1)
    assert table["vector"]["overall"]["recall@1"] == 0.5
    assert table["vector"]["overall"]["mrr@10"] == 0.75
    assert table["vector"]["overall"]["queries"] == 2
    assert table["keyword"]["by_kind"]["paraphrase"]["recall@1"] == 1.0
    assert table["hybrid"]["overall"]["ndcg@10"] == 0.0
    assert "unanswerable" not in table["vector"]["by_kind"]


# --- calibration ------------------------------------------------------------------------------


def _samples() -> list[Sample]:
    rows = []
    for i in range(20):  # answerable: high coverage, no unknown names
        rows.append(
            Sample(
                f"a{i}",
                {"coverage": 0.7 + i * 0.01, "unknown_names": 0.0, "top_similarity": 0.5},
                False,
            )
        )
    for i in range(3):  # unanswerable naming an unknown product
        rows.append(
            Sample(f"n{i}", {"coverage": 0.8, "unknown_names": 1.0, "top_similarity": 0.5}, True)
        )
    for i in range(3):  # unanswerable with poor coverage
        rows.append(
            Sample(
                f"c{i}",
                {"coverage": 0.3 + i * 0.05, "unknown_names": 0.0, "top_similarity": 0.5},
                True,
            )
        )
    return rows


def test_calibration_finds_a_separating_rule() -> None:
    rule, report = calibrate(_samples())
    assert report["unanswerable_flagged"] == 1.0
    assert report["answerable_flagged"] == 0.0
    described = rule.describe()
    assert "unknown_names >= 1" in described
    assert "coverage < 0.55" in described
    assert rule_rates(rule, _samples())["unanswerable_flagged"] == 1.0
    # the stored form round-trips
    again = AbstentionRule.from_json(rule.to_json(), source="calibrated")
    assert again.clauses == rule.clauses


def test_calibration_respects_the_false_flag_budget() -> None:
    hard = Sample("hard", {"coverage": 0.2, "unknown_names": 0.0, "top_similarity": 0.5}, False)
    samples = [*_samples(), hard]
    rule, report = calibrate(samples, max_false_positive_rate=0.0)
    assert report["answerable_flagged"] == 0.0
    assert rule_rates(rule, samples)["wrongly_flagged"] == []
    assert report["unanswerable_flagged"] < 1.0
    none = AbstentionRule((), source="x")
    assert rule_rates(none, samples)["unanswerable_flagged"] == 0.0
    assert Condition("coverage", "<", 0.5).holds({"coverage": None}) is False


def test_calibration_bounds_false_flags_in_every_group() -> None:
    # group "a" (10 answerable): one answerable question has the low coverage of a's
    # unanswerable ones; group "b" (40 answerable): its unanswerable ones name unknown products
    def sample(name: str, group: str, coverage: float, names: float, unanswerable: bool) -> Sample:
        signals = {"coverage": coverage, "unknown_names": names}
        return Sample(name, signals, unanswerable, group=group)

    samples = [sample(f"a{i}", "a", 0.9, 0.0, False) for i in range(9)]
    samples.append(sample("a-low", "a", 0.1, 0.0, False))
    samples += [sample(f"au{i}", "a", 0.1, 0.0, True) for i in range(5)]
    samples += [sample(f"b{i}", "b", 0.9, 0.0, False) for i in range(40)]
    samples += [sample(f"bu{i}", "b", 0.2, 1.0, True) for i in range(5)]
    # pooled, one false flag in 50 answerable questions fits a 5% budget: coverage catches all
    pooled, _ = calibrate([dataclasses.replace(s, group="") for s in samples])
    assert rule_rates(pooled, samples)["wrongly_flagged"] == ["a-low"]
    # by group, a's budget is 0 of 10: only b's unknown names may be flagged
    grouped, report = calibrate(samples)
    assert grouped.describe() == "(unknown_names >= 1)"
    assert report["wrongly_flagged"] == [] and report["unanswerable_flagged"] == 0.5


def test_multipage_questions_count_the_share_of_their_pages_found(tmp_path: Path) -> None:
    from loader.evaluation.report import render

    path = tmp_path / "q.json"
    path.write_text(
        json.dumps(
            [
                {"id": "m", "question": "q", "kind": "multipage", "sources": ["a.html", "b.html"]},
                {"id": "e", "question": "r", "kind": "exact", "sources": ["a.html"]},
            ]
        ),
        encoding="utf-8",
    )
    questions = load_questions(path)
    assert [q.kind for q in questions] == ["multipage", "exact"]
    settings = load_settings(env={}, database_url="postgresql://unused/db")

    def retrieve(text: str, emb: Any, mode: str, limit: int) -> list[dict[str, str]]:
        return [{"source_uri": f"/c/{n}"} for n in ("a.html", "x.html", "y.html", "b.html")]

    results = run_queries(
        None,  # type: ignore[arg-type]  # not used without abstention
        settings,
        [EvalQuery.from_question(q) for q in questions],
        embed_query=lambda text: [0.0],
        retrieve=retrieve,
        k=3,
        abstention=False,
    )
    table = aggregate(results, 3)
    # one of its two pages in the top 3: recall@3 0.5; the first found at rank 1: MRR 1
    assert table["hybrid"]["by_kind"]["multipage"] == {
        "recall@3": 0.5, "mrr@10": 1.0, "ndcg@10": 0.8772, "queries": 1
    }  # fmt: skip
    assert list(table["hybrid"]["by_kind"]) == ["exact", "multipage"]  # in KINDS order
    rows = per_query(results)
    assert rows[0]["hybrid"]["ranks"] == {"a.html": 1, "b.html": 4}
    report = {
        "kind": "questions", "questions_file": str(path), "questions": 2, "answerable": 2,
        "unanswerable": 0, "documents": 4, "corpus": "/c", "k": 3, "reranked": None,
        "parameters": {"embedding_model": "m", "embedding_dims": 3, "chunk_tokens": 1,
                       "chunk_overlap": 0, "vector_candidates": 1, "keyword_candidates": 1,
                       "rrf_k": 1, "keyword_ranking": "bm25"},
        "retrievers": table,
    }  # fmt: skip
    assert re.search(r"multipage\s+1\s+0\.500\s+0\.500\s+0\.500", render(report))
