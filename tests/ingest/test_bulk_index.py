"""Bulk loads: above hnsw_bulk_threshold the model's HNSW index is dropped before the load and
built after it (loader/ingest/bulk_index.py, kb.drop_model_index); below it, or when the load is
small next to what the index holds, the index stays. Searches work throughout; a load that fails
midway still ends with the index; doctor reports a missing index and reindex builds it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.db.connect import connect
from loader.errors import ConfigError, PgkbError, SqlState
from loader.ingest.pipeline import ingest_paths
from loader.ingest.writer import INGEST_LOCK_KEY
from loader.ops.models import reembed
from loader.providers.embeddings import get_embedder
from loader.search import Mode, search
from loader.settings import Settings, load_settings
from tests.fake_openai import FakeOpenAI, Reply, fake_vector
from tests.helpers import create_database, drop_database, ingest_settings, raises_code, settings_env

TOPICS = ["db", "vacuum", "checkpoint", "replication", "index", "locking", "partition", "backup"]
QUERIES = ["vacuum dead tuples", "checkpoint spacing", "streaming replication", "btree index"]


def run(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def write_corpus(root: Path, files: int, start: int = 0) -> None:
    """``files`` markdown files of two paragraphs each (six 40-token chunks per file)."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + files):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"Note {i}.{p} about {topic}: the {topic} settings of cluster {i} interact with "
            f"autovacuum, checkpoints and WAL in ways part {p} of this guide explains with "
            f"examples, measurements and the trade-offs operators meet in production."
            for p in range(2)
        ]
        (root / f"{topic}-{i:03d}.md").write_text(f"# {topic} {i}\n\n" + "\n\n".join(paragraphs))


def index_state(url: str) -> tuple[int, bool] | None:
    """(oid, valid) of the first model's HNSW index, or None when it does not exist."""
    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT i.oid::int, x.indisvalid FROM pg_class i JOIN pg_index x"
            " ON x.indexrelid = i.oid WHERE i.relname LIKE 'embeddings_hnsw_model_%'"
            " AND i.relnamespace = 'kb'::regnamespace ORDER BY i.relname LIMIT 1"
        ).fetchone()
    return None if row is None else (row[0], row[1])


def reloptions(url: str, model: str) -> list[str] | None:
    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT c.reloptions FROM pg_class c JOIN kb.embedding_models m"
            " ON c.relname = 'embeddings_hnsw_model_' || m.id WHERE m.name = %s",
            (model,),
        ).fetchone()
    return None if row is None else list(row[0] or [])


def results(settings: Settings, mode: Mode = "vector") -> list[list[tuple[str, int, float]]]:
    """Every query's top 5 (source, chunk index, score), through a connection of its own."""
    embedder = get_embedder(settings)
    conn = connect(str(settings.database_url))
    try:
        out = []
        for q in QUERIES:
            hits = search(conn, q, embedder.embed_query(q), settings=settings, mode=mode, limit=5)
            out.append([(h.source_uri, h.chunk_index, round(h.score, 6)) for h in hits])
    finally:
        conn.close()
    return out


def same_hits(a: list[list[tuple[str, int, float]]], b: list[list[tuple[str, int, float]]]) -> bool:
    """Do two runs of :func:`results` agree? Every query's scores must be equal, and so must its
    hits above the last score: chunks tied at the cut-off (the fake embedder gives chunks of the
    same text the same vector) are ordered by chunk id, which two loads may assign differently."""
    if len(a) != len(b):
        return False
    for hits_a, hits_b in zip(a, b, strict=True):
        if [h[2] for h in hits_a] != [h[2] for h in hits_b]:
            return False
        cut = hits_a[-1][2] if hits_a else 0.0
        if {h for h in hits_a if h[2] > cut} != {h for h in hits_b if h[2] > cut}:
            return False
    return True


class Watcher:
    """A progress callback that looks at the index and searches after every stored document."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.states: list[tuple[int, bool] | None] = []
        self.searches: list[list[list[tuple[str, int, float]]]] = []

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event in ("document", "batch"):
            self.states.append(index_state(str(self.settings.database_url)))
            self.searches.append(results(self.settings))


@pytest.fixture
def second_db(pg_url: str, template_db: str) -> Iterator[str]:
    name = f"pgkb_test_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, name, template=template_db)
    try:
        yield url
    finally:
        drop_database(pg_url, name)


def test_a_bulk_load_builds_the_index_after_and_searches_match_a_row_by_row_load(
    db_url: str, second_db: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 12)
    common = {"embedding_batch_size": 4, "hnsw_m": 8, "hnsw_ef_construction": 40}
    bulk = ingest_settings(db_url, tmp_path, fake_openai, hnsw_bulk_threshold=30, **common)
    rowwise = ingest_settings(second_db, tmp_path, fake_openai, hnsw_bulk_threshold=0, **common)

    watch = Watcher(bulk)
    report = ingest_paths(bulk, [root], progress=watch)
    assert report.exit_code == 0, report.to_dict()
    assert report.chunks_written == 72 and report.index_rebuilt and "index" in report.seconds
    # the first batch (3 documents, 18 chunks: below the threshold) went into the index row by
    # row; the batch that crossed 30 dropped it, and searches kept answering (exactly) without it
    assert watch.states[0] is not None
    assert None in watch.states
    assert all(found for found in watch.searches)
    first_missing = watch.states.index(None)
    assert all(s is None for s in watch.states[first_missing:])
    # after the load: present, valid, built with the configured parameters
    state = index_state(bulk_url := str(bulk.database_url))
    assert state is not None and state[1] is True and state != watch.states[0]
    assert reloptions(bulk_url, "fake-embed") == ["m=8", "ef_construction=40"]

    watch_rows = Watcher(rowwise)
    plain = ingest_paths(rowwise, [root], progress=watch_rows)
    assert plain.exit_code == 0 and not plain.index_rebuilt
    assert plain.chunks_written == report.chunks_written
    assert len(set(watch_rows.states)) == 1 and watch_rows.states[0] is not None

    # the same results, through the index, from either load (and the same as mid-load)
    modes: list[Mode] = ["vector", "hybrid"]
    for mode in modes:
        assert same_hits(results(bulk, mode), results(rowwise, mode)), mode
    assert same_hits(watch.searches[-1], results(bulk))

    # the CLI says so in its summary
    more = tmp_path / "more"
    write_corpus(more, 15, start=100)  # 90 chunks: more than the 72 the index holds
    env = settings_env(bulk) | {"PGKB_HNSW_BULK_THRESHOLD": "30", "PGKB_EMBEDDING_BATCH_SIZE": "4"}
    out = run(["ingest", str(more)], env)
    assert out.exit_code == 0, out.output
    assert "HNSW index built after the bulk load" in out.output


def test_a_load_below_the_threshold_or_small_next_to_the_index_keeps_it(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 12)
    settings = ingest_settings(db_url, tmp_path, fake_openai, embedding_batch_size=4)
    watch = Watcher(settings)
    report = ingest_paths(settings, [root], progress=watch)  # default threshold: 500
    assert report.exit_code == 0 and report.chunks_written < 500
    assert not report.index_rebuilt
    assert len(set(watch.states)) == 1 and watch.states[0] is not None  # same index throughout
    assert index_state(db_url) == watch.states[0]

    # above the threshold but fewer than the index holds: inserting wins, the index stays
    more = tmp_path / "more"
    write_corpus(more, 4, start=50)
    small = settings.replace(hnsw_bulk_threshold=5)
    watch_more = Watcher(small)
    added = ingest_paths(small, [more], progress=watch_more)
    assert added.exit_code == 0 and 5 <= added.chunks_written < report.chunks_written
    assert not added.index_rebuilt
    assert set(watch_more.states) == {watch.states[0]}


class FailAfter:
    """Embeddings replies that answer the first ``texts`` chunk texts and fail (500) from then
    on (search queries are always answered)."""

    def __init__(self, texts: int) -> None:
        self.left = texts

    def __call__(self, request: Any) -> Reply:
        inputs = request.body["input"]
        is_query = set(inputs) <= set(QUERIES)  # the watcher's searches embed their queries
        if not is_query:
            self.left -= len(inputs)
        if self.left < 0 and not is_query:
            return Reply(status=500)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, 8)}
            for i, t in enumerate(inputs)
        ]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return Reply({"object": "list", "data": data, "model": "x", "usage": usage})


def test_a_load_that_fails_midway_still_ends_with_the_index(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 12)
    settings = ingest_settings(
        db_url, tmp_path, fake_openai, embedding_batch_size=4, hnsw_bulk_threshold=30
    )
    # the embeddings API gives up after 40 texts: the batch that crossed the threshold dropped
    # the index and was stored, a later one fails and stops the run
    fake_openai.script("/v1/embeddings", *([FailAfter(40)] * 200))
    watch = Watcher(settings)
    report = ingest_paths(settings, [root], progress=watch)
    assert report.exit_code == 2 and report.aborted
    assert None in watch.states  # it was dropped for the load
    state = index_state(db_url)
    assert state is not None and state[1] is True  # and built again although the run failed
    assert report.index_rebuilt
    assert report.chunks_written == 36  # two batches of 3 documents
    assert results(settings)[0]  # searches answer, through the index again


def test_a_reembed_that_fails_midway_rebuilds_its_index_as_it_was(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 6)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    env = settings_env(settings)
    added = run(
        ["models", "add", "fake-embed-2", "--dims", "8", "--provider", "openai",
         "--base-url", fake_openai.base_url, "--hnsw-m", "12", "--hnsw-ef-construction", "48"],
        env,
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    fake_openai.script("/v1/embeddings", FailAfter(4), Reply(status=500))  # batch 2 fails
    seen: list[list[str] | None] = []

    def look(event: str, info: dict[str, Any]) -> None:
        if event == "batch":
            seen.append(reloptions(db_url, "fake-embed-2"))

    bulk = settings.replace(hnsw_bulk_threshold=5)
    with pytest.raises(PgkbError):
        reembed(bulk, "fake-embed-2", batch_size=4, progress=look)
    assert seen == [None]  # the first batch was stored while the index was dropped
    # built again, with the model's own parameters (12/48), not the settings' (16/64)
    assert reloptions(db_url, "fake-embed-2") == ["m=12", "ef_construction=48"]
    fake_openai.requests.clear()
    done = reembed(bulk, "fake-embed-2", batch_size=4)
    # the resumed run: 32 missing, more than the 4 stored, so a bulk load again
    assert done.embedded == 32 and done.remaining == 0 and done.index_rebuilt
    assert reloptions(db_url, "fake-embed-2") == ["m=12", "ef_construction=48"]


def test_bad_threshold_values_are_refused(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    with pytest.raises(ConfigError, match=r"hnsw_bulk_threshold must be 0 .* or a positive number"):
        load_settings(env={"PGKB_HNSW_BULK_THRESHOLD": "-1"})
    with pytest.raises(ConfigError, match="PGKB_HNSW_BULK_THRESHOLD: invalid value 'many'"):
        load_settings(env={"PGKB_HNSW_BULK_THRESHOLD": "many"})
    with pytest.raises(ConfigError, match=r"invalid value '1\.5' for hnsw_bulk_threshold"):
        load_settings(env={"PGKB_HNSW_BULK_THRESHOLD": "1.5"})
    assert load_settings(env={"PGKB_HNSW_BULK_THRESHOLD": "0"}).hnsw_bulk_threshold == 0
    env = settings_env(ingest_settings(db_url, tmp_path, fake_openai))
    root = tmp_path / "docs"
    write_corpus(root, 1)
    result = run(["ingest", str(root)], env | {"PGKB_HNSW_BULK_THRESHOLD": "-5"})
    assert result.exit_code == 2
    assert "hnsw_bulk_threshold must be 0" in result.stderr
    assert index_state(db_url) is None  # nothing was written: no model registered


def test_drop_model_index_is_for_kb_writer_who_cannot_drop_the_index_itself(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 2)
    settings = ingest_settings(db_url, tmp_path, fake_openai, hnsw_m=8, hnsw_ef_construction=40)
    assert ingest_paths(settings, [root]).exit_code == 0
    with psycopg.connect(db_url, autocommit=True) as admin:
        model_id = admin.execute("SELECT id FROM kb.embedding_models").fetchone()[0]
        admin.execute("SET ROLE kb_writer")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            admin.execute(f"DROP INDEX kb.embeddings_hnsw_model_{int(model_id)}")
        got = admin.execute("SELECT kb.drop_model_index(%s)", (model_id,)).fetchone()[0]
        assert got == {
            "index": f"embeddings_hnsw_model_{model_id}",
            "m": 8,
            "ef_construction": 40,
        }
        assert admin.execute("SELECT kb.drop_model_index(%s)", (model_id,)).fetchone()[0] is None
        with raises_code(SqlState.NOT_FOUND, match="no embedding model has id 999"):
            admin.execute("SELECT kb.drop_model_index(999)")
        admin.execute("SELECT kb.build_model_index(%s, 8, 40)", (model_id,))
        admin.execute("RESET ROLE")
        admin.execute("SET ROLE kb_reader")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            admin.execute("SELECT kb.drop_model_index(%s)", (model_id,))
    assert index_state(db_url) is not None


def test_doctor_reports_a_missing_index_and_reindex_builds_it(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 2)
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 0
    env = settings_env(settings)
    with psycopg.connect(db_url, autocommit=True) as admin:  # a bulk load killed mid-way
        admin.execute("SELECT kb.drop_model_index(id) FROM kb.embedding_models")

        # while a load holds the ingestion lock, the missing index is its business
        admin.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK_KEY,))
        held = json.loads(run(["db", "doctor", "--json"], env).stdout)
        check = next(c for c in held["checks"] if c["name"] == "indexes")
        assert check["status"] == "ok" and "dropped for a bulk load" in check["detail"]
        waiting = run(["db", "reindex"], env)
        assert waiting.exit_code == 0 and "not built: a load in progress" in waiting.stderr
        assert index_state(db_url) is None
        admin.execute("SELECT pg_advisory_unlock(%s)", (INGEST_LOCK_KEY,))

    result = run(["db", "doctor", "--json"], env)
    assert result.exit_code == 1
    check = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "indexes")
    assert check["status"] == "fail"
    assert "missing HNSW index: embeddings_hnsw_model_" in check["detail"]
    assert "(model fake-embed)" in check["detail"] and "pgkb db reindex" in check["fix"]

    fixed = run(["db", "reindex"], env)
    assert fixed.exit_code == 0, fixed.output
    assert "built the missing HNSW index kb.embeddings_hnsw_model_" in fixed.stdout
    state = index_state(db_url)
    assert state is not None and state[1] is True
    assert run(["db", "doctor"], env).exit_code == 0
