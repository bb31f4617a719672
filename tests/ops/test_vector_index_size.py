"""The HNSW index sized for the corpus: parameters from the number of embeddings when it is
built, recorded, shown by pgkb db status, followed by the searches, overridable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner

from loader.cli import cli
from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, load_golden, rows, settings_env, write_docs


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _options(conn: psycopg.Connection[Any], model_id: int) -> list[str] | None:
    row = conn.execute(
        "SELECT reloptions FROM pg_class WHERE relname = 'embeddings_hnsw_model_' || %s",
        (model_id,),
    ).fetchone()
    return None if row is None else list(row[0])


def test_tiers_switch_at_a_quarter_million_embeddings(conn: psycopg.Connection[Any]) -> None:
    got = rows(
        conn,
        "SELECT n, (kb.hnsw_parameters(n)).* FROM unnest(ARRAY[NULL, -5, 0, 249999, 250000,"
        " 1000000]::bigint[]) AS n",
    )
    assert [(r["m"], r["ef_construction"], r["ef_search"], r["tier"]) for r in got] == [
        (16, 64, 200, "small")
    ] * 4 + [(48, 200, 400, "large")] * 2


def test_a_new_index_is_sized_and_recorded_and_searched_at_its_ef_search(
    conn: psycopg.Connection[Any],
) -> None:
    golden = load_golden(conn)
    model = golden.model_id
    assert _options(conn, model) == ["m=16", "ef_construction=64"]
    recorded = rows(conn, "SELECT * FROM kb.vector_indexes WHERE model_id = %s", (model,))
    assert len(recorded) == 1
    assert recorded[0]["m"] == 16 and recorded[0]["ef_search"] == 200
    assert recorded[0]["sized_by"] == "corpus"
    # the index was built when the model registered (no embeddings yet)
    assert recorded[0]["embedding_count"] == 0
    ef = "SELECT kb.hnsw_ef_search(%s, %s, %s)"
    assert conn.execute(ef, (model, 20, None)).fetchone()[0] == 200
    assert conn.execute(ef, (model, 300, None)).fetchone()[0] == 600  # 2 * match_count
    assert conn.execute(ef, (model, 20, 90)).fetchone()[0] == 90  # given: used as it is
    conn.execute("UPDATE kb.vector_indexes SET ef_search = 800 WHERE model_id = %s", (model,))
    assert conn.execute(ef, (model, 20, None)).fetchone()[0] == 800  # follows the index
    assert conn.execute(ef, (model, 20, 5000)).fetchone()[0] == 1000
    assert conn.execute(ef, (999, 20, None)).fetchone()[0] == 200  # no record


def test_resize_rebuilds_an_index_whose_tier_no_longer_fits(
    conn: psycopg.Connection[Any],
) -> None:
    golden = load_golden(conn)
    model = golden.model_id
    conn.commit()
    # an index built when the corpus was large (the record and the graph say m 32); the corpus
    # is small now, so the resize builds the small tier's graph again
    conn.execute("SELECT kb.drop_model_index(%s)", (model,))
    conn.execute("SELECT kb.build_model_index(%s, 32, 128)", (model,))
    conn.execute("UPDATE kb.vector_indexes SET sized_by = 'corpus' WHERE model_id = %s", (model,))
    assert _options(conn, model) == ["m=32", "ef_construction=128"]
    done = conn.execute("SELECT kb.resize_model_index(%s)", (model,)).fetchone()[0]
    assert done["resized"] is True
    assert (done["m"], done["ef_construction"], done["ef_search"]) == (16, 64, 200)
    assert done["previous"]["m"] == 32
    assert _options(conn, model) == ["m=16", "ef_construction=64"]
    embeddings = conn.execute(
        "SELECT count(*) FROM kb.embeddings WHERE model_id = %s", (model,)
    ).fetchone()[0]
    assert conn.execute(
        "SELECT embedding_count FROM kb.vector_indexes WHERE model_id = %s", (model,)
    ).fetchone() == (embeddings,)
    # in its tier already: nothing rebuilt
    again = conn.execute("SELECT kb.resize_model_index(%s)", (model,)).fetchone()[0]
    assert again["resized"] is False
    # an index given its parameters explicitly is never resized
    conn.execute("SELECT kb.drop_model_index(%s)", (model,))
    conn.execute("SELECT kb.build_model_index(%s, 24, 96)", (model,))
    kept = conn.execute("SELECT kb.resize_model_index(%s)", (model,)).fetchone()[0]
    assert kept["resized"] is False and kept["m"] == 24
    assert _options(conn, model) == ["m=24", "ef_construction=96"]


def test_a_bulk_load_rebuilds_the_index_sized_for_the_corpus_it_leaves(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai, hnsw_bulk_threshold=1)
    assert ingest_paths(settings, [root]).exit_code == 0
    recorded = rows(conn, "SELECT * FROM kb.vector_indexes")
    embeddings = conn.execute("SELECT count(*) FROM kb.embeddings").fetchone()[0]
    assert len(recorded) == 1 and embeddings > 0
    # built after the load, for the embeddings it wrote (not when the model registered)
    assert recorded[0]["embedding_count"] == embeddings
    assert recorded[0]["sized_by"] == "corpus" and recorded[0]["m"] == 16


def test_status_shows_the_index_and_settings_override_the_size(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    write_docs(root)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    env = settings_env(settings)
    shown = run(["db", "status"], env)
    assert shown.exit_code == 0, shown.output
    assert "vector_index: kb.embeddings_hnsw_model_" in shown.stdout
    assert "m 16, ef_construction 64, ef_search 200" in shown.stdout
    assert "(small tier)" in shown.stdout
    # the settings override what the corpus would choose, for every index built from then on
    model = conn.execute("SELECT id FROM kb.embedding_models").fetchone()[0]
    conn.execute("SELECT kb.drop_model_index(%s)", (model,))
    conn.commit()
    built = run(["db", "reindex"], {**env, "PGKB_HNSW_M": "12", "PGKB_HNSW_EF_CONSTRUCTION": "48"})
    assert built.exit_code == 0, built.output
    assert _options(conn, model) == ["m=12", "ef_construction=48"]
    shown = run(["db", "status"], env)
    assert "m 12, ef_construction 48 (set explicitly), ef_search 200" in shown.stdout
