"""loader.search.search and `pgkb search`: the thin Python over kb.hybrid_search."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader import resources
from loader.cli import cli
from loader.errors import ModelMismatchError, PgkbError
from loader.search import SearchHit, search
from loader.settings import Settings, load_settings
from tests.helpers import D1, D2, D3, Corpus, create_database, drop_database, load_golden


@pytest.fixture
def golden(conn: psycopg.Connection[Any]) -> Corpus:
    return load_golden(conn)


@pytest.fixture
def golden_settings(settings: Settings) -> Settings:
    return settings.replace(embedding_model="golden", embedding_dims=3, embedding_provider="local")


def test_hybrid_hits_carry_every_column(
    conn: psycopg.Connection[Any], golden: Corpus, golden_settings: Settings
) -> None:
    hits = search(conn, "vacuum", [0.0, 0.6, 0.8], settings=golden_settings, limit=3)
    assert all(isinstance(h, SearchHit) for h in hits)
    c = golden.ids
    # vector: 3 (1.0), 4 (0.8), 2 (0.6); keyword: 4, 2 -> RRF (k=10, vector weight 2, keyword
    # weight 1.5: "vacuum" is the whole query, share 1): 4, 2, 3 (3 is within its lead slot)
    s = golden_settings
    assert (s.rrf_k, s.vector_weight, s.keyword_weight, s.lead_slot) == (10, 2.0, 1.5, 3)
    assert [h.chunk_id for h in hits] == [c[4], c[2], c[3]]
    top = hits[0]
    assert top.score == pytest.approx(2 / 12 + 1.5 / 11)
    assert (top.vector_rank, top.keyword_rank) == (2, 1)
    assert top.vector_similarity == pytest.approx(0.8)
    assert top.keyword_score is not None and top.keyword_score > 0
    assert top.document_id == D3 and top.title == "Routine Vacuuming"
    assert top.source_uri == "routine-vacuuming.html" and top.heading_path == "Routine Vacuuming"
    assert top.category == "maintenance" and top.metadata == {"team": "ops"}
    assert top.token_count == 15 and top.chunk_index == 0
    assert json.loads(json.dumps(top.to_dict()))["document_id"] == str(D3)


def test_settings_drive_the_fusion(
    conn: psycopg.Connection[Any], golden: Corpus, golden_settings: Settings
) -> None:
    s = golden_settings.replace(rrf_k=1, vector_weight=3.0, keyword_weight=0.5, match_count=2)
    hits = search(conn, "vacuum", [0.0, 0.6, 0.8], settings=s)
    c = golden.ids
    expected = {c[3]: 3 / 2, c[4]: 3 / 3 + 0.5 / 2, c[2]: 3 / 4 + 0.5 / 3}
    assert [h.chunk_id for h in hits] == [c[3], c[4]]
    assert [h.score for h in hits] == pytest.approx([expected[c[3]], expected[c[4]]])
    strict = golden_settings.replace(min_similarity=0.9)
    hits = search(conn, "vacuum", [0.0, 0.6, 0.8], settings=strict, mode="vector")
    assert [h.chunk_id for h in hits] == [c[3]]


def test_modes(conn: psycopg.Connection[Any], golden: Corpus, golden_settings: Settings) -> None:
    c = golden.ids
    vec = search(conn, "ignored", [1.0, 0.0, 0.0], settings=golden_settings, mode="vector", limit=2)
    assert [(h.chunk_id, h.vector_rank, h.keyword_rank) for h in vec] == [
        (c[0], 1, None),
        (c[1], 2, None),
    ]
    assert vec[0].score == pytest.approx(1.0)
    kw = search(conn, "40P01", None, settings=golden_settings, mode="keyword")
    assert [(h.chunk_id, h.keyword_rank, h.vector_rank) for h in kw] == [(c[0], 1, None)]
    ts = search(
        conn,
        "vacuum",
        None,
        settings=golden_settings.replace(keyword_ranking="ts_rank"),
        mode="keyword",
    )
    assert ts[0].keyword_score == pytest.approx(
        conn.execute(
            "SELECT ts_rank(tsv, 'vacuum'::tsquery)::float8 FROM kb.chunks WHERE id = %s",
            (ts[0].chunk_id,),
        ).fetchone()[0]
    )
    only_text = search(conn, "vacuum", None, settings=golden_settings)
    assert [h.chunk_id for h in only_text] == [c[4], c[2]]
    assert all(h.vector_rank is None for h in only_text)


def test_filters_category_and_documents(
    conn: psycopg.Connection[Any], golden: Corpus, golden_settings: Settings
) -> None:
    c = golden.ids
    q = [1.0, 1.0, 1.0]
    by_category = search(
        conn, "memory", q, settings=golden_settings, category="configuration", limit=10
    )
    assert sorted(h.chunk_id for h in by_category) == [c[2], c[3]]
    by_doc = search(
        conn, "memory", q, settings=golden_settings, document_ids=[str(D1), D3], limit=10
    )
    assert sorted(h.chunk_id for h in by_doc) == [c[0], c[1], c[4]]
    by_meta = search(
        conn, "memory", q, settings=golden_settings, filters={"metadata": {"team": "db"}}, limit=10
    )
    assert sorted(h.chunk_id for h in by_meta) == [c[0], c[1]]
    both = search(
        conn,
        "memory",
        q,
        settings=golden_settings,
        category="configuration",
        filters={"source": "%resource%"},
        document_ids=[D2],
        limit=10,
    )
    assert sorted(h.chunk_id for h in both) == [c[2], c[3]]


def test_errors_are_actionable(
    conn: psycopg.Connection[Any], golden: Corpus, golden_settings: Settings
) -> None:
    with pytest.raises(ModelMismatchError, match="2 dimensions, but model golden"):
        search(conn, "vacuum", [1.0, 0.0], settings=golden_settings)
    with pytest.raises(ModelMismatchError, match=r"'minilm' is not registered.*golden"):
        search(
            conn,
            "vacuum",
            [1.0, 0.0, 0.0],
            settings=golden_settings.replace(embedding_model="minilm"),
        )
    with pytest.raises(PgkbError, match="valid keys are: category, metadata, source"):
        search(conn, "vacuum", None, settings=golden_settings, filters={"tag": "x"})
    with pytest.raises(PgkbError, match="'not-a-uuid' is not a UUID"):
        search(conn, "vacuum", None, settings=golden_settings, document_ids=["not-a-uuid"])
    with pytest.raises(PgkbError, match="needs a query embedding"):
        search(conn, "vacuum", None, settings=golden_settings, mode="vector")
    with pytest.raises(PgkbError, match="unknown search mode"):
        search(conn, "vacuum", None, settings=golden_settings, mode="semantic")  # type: ignore[arg-type]
    # the connection is usable after each error
    assert search(conn, "vacuum", None, settings=golden_settings)


def test_cli_keyword_table_and_json(
    conn: psycopg.Connection[Any], golden: Corpus, cli_env: dict[str, str]
) -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli, ["search", "maintenance_work_mem", "--mode", "keyword"], env=cli_env
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "2 result(s), keyword search"
    assert lines[2].startswith(" 1. ") and "Resource Consumption" in lines[2]
    assert "runtime-config-resource.html" in lines[3]
    assert "maintenance_work_mem sets the memory" in result.output
    result = runner.invoke(
        cli,
        [
            "search",
            "memory",
            "--mode",
            "keyword",
            "--json",
            "--limit",
            "1",
            "--category",
            "configuration",
        ],
        env=cli_env,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data) == 1 and data[0]["category"] == "configuration"
    assert set(data[0]) >= {
        "chunk_id",
        "document_id",
        "title",
        "source_uri",
        "chunk_index",
        "heading_path",
        "content",
        "score",
        "vector_rank",
        "vector_similarity",
        "keyword_rank",
        "keyword_score",
    }
    result = runner.invoke(
        cli, ["search", "memory", "--mode", "keyword", "--json", "--doc", str(D3)], env=cli_env
    )
    assert json.loads(result.output) == []


def test_cli_errors(conn: psycopg.Connection[Any], golden: Corpus, cli_env: dict[str, str]) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["search", "x", "--mode", "keyword", "--doc", "nope"], env=cli_env)
    assert result.exit_code == 2
    assert "'nope' is not a UUID" in result.output
    result = runner.invoke(cli, ["search", "  ", "--mode", "keyword"], env=cli_env)
    assert result.exit_code == 2 and "empty" in result.output
    result = runner.invoke(cli, ["search", "vacuum", "--limit", "0"], env=cli_env)
    assert result.exit_code == 2


# --- with the real local model --------------------------------------------------------------

SAMPLE_PAGES = [
    "errcodes-appendix.html",
    "backup-dump.html",
    "datatype-uuid.html",
    "gin-intro.html",
    "jit-reason.html",
    "sql-notify.html",
    "indexes-partial.html",
]


@pytest.fixture(scope="module")
def sample_kb(
    pg_url: str, template_db: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any
) -> Iterator[Settings]:
    """Seven sample manual pages ingested with the real model, once for this module."""
    from loader.ingest.pipeline import ingest_paths

    name = f"pgkb_search_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name, template=template_db)
    try:
        settings = load_settings(
            env={}, database_url=url, data_dir=str(tmp_path_factory.mktemp("data"))
        )
        pages = [Path(resources.sample_corpus_dir()) / page for page in SAMPLE_PAGES]
        report = ingest_paths(settings, pages, embedder=embedder)
        assert not report.aborted
        yield settings
    finally:
        drop_database(pg_url, name)


def _uri_of(hit: SearchHit) -> str:
    return hit.source_uri.rsplit("/", 1)[-1]


@pytest.mark.model
@pytest.mark.parametrize(
    ("query", "page"),
    [
        ("40P01", "errcodes-appendix.html"),
        ('"deadlock_detected"', "errcodes-appendix.html"),
        ("pg_dump", "backup-dump.html"),
        ("LISTEN", "sql-notify.html"),
    ],
)
def test_exact_identifier_finds_its_page_first(
    sample_kb: Settings, embedder: Any, query: str, page: str
) -> None:
    from loader.db.session import connection

    with connection(sample_kb) as conn:
        for mode in ("hybrid", "keyword"):
            vector = embedder.embed_query(query) if mode == "hybrid" else None
            hits = search(conn, query, vector, settings=sample_kb, mode=mode)  # type: ignore[arg-type]
            assert _uri_of(hits[0]) == page, (mode, [_uri_of(h) for h in hits])


@pytest.mark.model
@pytest.mark.parametrize(
    ("question", "page"),
    [
        (
            "Which kind of value is practically certain never to collide, even across machines?",
            "datatype-uuid.html",
        ),
        ("emit machine instructions at runtime to go faster", "jit-reason.html"),
    ],
)
def test_paraphrase_without_shared_words_finds_its_page(
    sample_kb: Settings, embedder: Any, question: str, page: str
) -> None:
    from loader.db.session import connection

    with connection(sample_kb) as conn:
        doc = conn.execute(
            "SELECT id FROM kb.documents WHERE source_uri LIKE %s", ("%" + page,)
        ).fetchone()[0]
        # the question shares no content word with the page: keyword search cannot find it
        assert (
            conn.execute(
                "SELECT count(*) FROM kb.keyword_search(%s, 100, document_ids => %s)",
                (question, [doc]),
            ).fetchone()[0]
            == 0
        )
        hits = search(conn, question, embedder.embed_query(question), settings=sample_kb)
    assert page in [_uri_of(h) for h in hits[:5]]


@pytest.mark.model
def test_cli_hybrid_search_embeds_the_question(sample_kb: Settings) -> None:
    cli_env = {
        "PGKB_DATABASE_URL": str(sample_kb.database_url),
        "PGKB_DATA_DIR": str(sample_kb.data_dir),
    }
    result = CliRunner().invoke(
        cli, ["search", "what does SQLSTATE 40P01 mean", "--json"], env=cli_env
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data) == 5
    assert data[0]["source_uri"].endswith("errcodes-appendix.html")
    # the keyword leg finds this page alone; only an embedded question gives vector ranks
    assert any(row["vector_rank"] is not None for row in data), data
    assert all(
        row["vector_similarity"] is None or -1 <= row["vector_similarity"] <= 1 for row in data
    )
    assert uuid.UUID(data[0]["document_id"])
