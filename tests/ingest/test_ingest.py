"""Ingestion against a real PostgreSQL: incremental, atomic, bad inputs, locking, the CLI.

The embedding model here is the fake OpenAI-compatible server (8-dimensional vectors derived
from each input's hash), so these tests are fast and can count the embedding requests; the real
local model is used by the tests marked ``model``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.errors import ConfigError, ModelMismatchError, PgkbError
from loader.ingest.extract import Section
from loader.ingest.pipeline import ingest_documents, ingest_paths
from loader.ingest.sources import SourceDocument
from loader.ingest.writer import INGEST_LOCK_KEY, ingest_lock
from loader.providers.openai_embeddings import OpenAIEmbedder
from loader.settings import load_settings
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import PARAGRAPHS
from tests.helpers import check_whole as _check_whole
from tests.helpers import ingest_settings as _settings
from tests.helpers import settings_env as _env
from tests.helpers import stored_documents as _documents
from tests.helpers import write_docs as _write_docs
from tests.pdfs import blank_pdf, text_pdf


def _embedding_inputs(fake: FakeOpenAI) -> list[str]:
    return [t for r in fake.requests_to("/v1/embeddings") for t in r.body["input"]]


def test_ingest_then_unchanged_then_one_edit(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)

    first = ingest_paths(settings, [root], category="ops", meta={"team": "dba"})
    assert first.failed == []
    assert (first.files_seen, first.new, first.changed, first.unchanged) == (5, 5, 0, 0)
    assert first.embeddings_computed == first.chunks_written > 5
    assert first.exit_code == 0
    docs = _documents(conn)
    assert {name: title for name, (title, _) in docs.items()} == {
        "vacuum.md": "Vacuum",
        "wal.md": "WAL",
        "notes.txt": "notes",
        "page.html": "Locks",
        "guide.pdf": "Backup Guide",
    }
    _check_whole(conn)
    meta = conn.execute(
        "SELECT category, metadata FROM kb.documents WHERE source_uri = %s",
        (str((root / "guide.pdf").resolve()),),
    ).fetchone()
    assert meta is not None
    assert meta[0] == "ops"
    assert meta[1]["team"] == "dba"
    assert meta[1]["file_name"] == "guide.pdf"
    assert meta[1]["mime_type"] == "application/pdf"
    assert meta[1]["page_count"] == 1
    assert "modified" in meta[1]
    heading = conn.execute(
        "SELECT heading_path FROM kb.chunks WHERE content LIKE 'Archive WAL%%'"
    ).fetchone()
    assert heading == ("WAL > Archiving",)
    # keyword search sees the heading path (weight A in the generated tsv)
    hit = conn.execute(
        "SELECT count(*) FROM kb.chunks WHERE tsv @@ to_tsquery('english', 'archiving')"
    ).fetchone()
    assert hit == (1,)
    conn.rollback()

    requests_before = len(fake_openai.requests_to("/v1/embeddings"))
    second = ingest_paths(settings, [root], category="ops", meta={"team": "dba"})
    assert (second.unchanged, second.new, second.changed) == (5, 0, 0)
    assert second.embeddings_computed == second.chunks_written == 0
    assert len(fake_openai.requests_to("/v1/embeddings")) == requests_before

    # one paragraph of one file changes: only its chunk is embedded again
    edited = PARAGRAPHS[:]
    edited[1] = "Autovacuum launches workers that vacuum tables past their thresholds."
    (root / "guides" / "vacuum.md").write_text("# Vacuum\n\n" + "\n\n".join(edited) + "\n")
    fake_openai.requests.clear()
    third = ingest_paths(settings, [root], category="ops", meta={"team": "dba"})
    assert (third.changed, third.unchanged) == (1, 4)
    assert third.embeddings_computed == 1
    assert third.embeddings_reused == third.chunks_written - 1
    assert _embedding_inputs(fake_openai) == [f"Vacuum\n\n{edited[1]}"]
    _check_whole(conn)
    contents = conn.execute(
        "SELECT c.content FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
        "WHERE d.source_uri LIKE '%%vacuum.md' ORDER BY c.chunk_index"
    ).fetchall()
    assert [c for (c,) in contents] == edited


def test_unchanged_files_are_not_parsed(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])

    def no_parsing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an unchanged file was parsed")

    monkeypatch.setattr("loader.ingest.pipeline.extract", no_parsing)
    report = ingest_paths(settings, [root])
    assert report.unchanged == 5
    # a different chunk size changes what is stored: everything is re-chunked (not re-read
    # blindly: the hash includes the chunking settings)
    monkeypatch.undo()
    resized = ingest_paths(settings.replace(chunk_tokens=30), [root])
    assert resized.changed == 5


def test_same_text_in_another_document_reuses_its_embedding(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    body = "\n\n".join(PARAGRAPHS)
    (root / "a.txt").write_text(body)
    settings = _settings(db_url, tmp_path, fake_openai, embed_heading_path=False)
    first = ingest_paths(settings, [root])
    (root / "b.txt").write_text(body)
    second = ingest_paths(settings, [root])
    assert second.new == 1
    assert second.embeddings_computed == 0
    assert second.embeddings_reused == first.chunks_written


def test_prune_removes_documents_whose_files_are_gone(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    other = tmp_path / "other"
    _write_docs(root)
    other.mkdir()
    (other / "keep.md").write_text("# Keep\n\nOutside the pruned root.\n")
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root, other])
    (root / "notes.txt").unlink()
    (other / "keep.md").unlink()
    (root / "new.md").write_text("# New\n\nAdded later.\n")

    without = ingest_paths(settings, [root])
    assert without.pruned == 0
    assert "notes.txt" in _documents(conn)

    report = ingest_paths(settings, [root], prune=True)
    assert report.pruned == 1
    names = set(_documents(conn))
    assert "notes.txt" not in names
    assert "keep.md" in names  # not under the given root
    assert "new.md" in names
    orphans = conn.execute(
        "SELECT count(*) FROM kb.chunks c LEFT JOIN kb.documents d ON d.id = c.document_id "
        "WHERE d.id IS NULL"
    ).fetchone()
    assert orphans == (0,)


def test_bad_inputs_are_reported_per_file_and_the_rest_is_ingested(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nThis one is fine.\n")
    (root / "empty.md").write_bytes(b"")
    (root / "binary.txt").write_bytes(b"\x00\x01\x02\x03 binary junk \xff\xfe")
    (root / "latin1.txt").write_bytes("Caf\u00e9 cr\u00e8me".encode("latin-1"))
    (root / "scan.pdf").write_bytes(blank_pdf(2))
    (root / "locked.pdf").write_bytes(text_pdf([["secret"]], password="pw"))
    with open(root / "huge.txt", "wb") as handle:  # 200 MB, sparse: costs no disk
        handle.truncate(200 * 1024 * 1024)
    (root / "loop").mkdir()
    (root / "loop" / "again").symlink_to(root / "loop", target_is_directory=True)
    (root / "self.md").symlink_to(root / "self.md")
    (root / "dangling.md").symlink_to(root / "missing.md")

    settings = _settings(db_url, tmp_path, fake_openai)
    report = ingest_paths(settings, [root])
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert report.new == 1
    assert report.exit_code == 1
    assert "empty file" in reasons["empty.md"]
    assert "binary content" in reasons["binary.txt"]
    assert "invalid UTF-8 at byte 3" in reasons["latin1.txt"]
    assert "no text layer" in reasons["scan.pdf"]
    assert "encrypted PDF" in reasons["locked.pdf"]
    assert "file too large (209.7 MB, the limit is 50.0 MB)" in reasons["huge.txt"]
    assert "symlink loop" in reasons["again"]
    assert reasons["self.md"] == "symlink loop"
    assert reasons["dangling.md"] == "broken symbolic link"
    assert set(_documents(conn)) == {"good.md"}


def test_a_failed_file_keeps_its_stored_version(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "policy.txt").write_text("The original policy text.")
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    before = _documents(conn)
    (root / "policy.txt").write_bytes(b"broken \xff\xfe encoding")
    report = ingest_paths(settings, [root])
    assert report.exit_code == 1
    assert _documents(conn) == before
    assert conn.execute("SELECT content FROM kb.chunks").fetchall() == [
        ("The original policy text.",)
    ]


def test_files_deleted_or_changed_during_the_run(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (root / name).write_text(f"# {name}\n\nText of {name}.\n")
    growing = (root / "c.md").resolve()

    def delete_b(event: str, info: dict[str, Any]) -> None:
        if event == "scanned":
            (root / "b.md").unlink()

    real_fstat = os.fstat
    identity = (growing.stat().st_dev, growing.stat().st_ino)
    calls: dict[str, int] = {}

    def fstat(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        if (result.st_dev, result.st_ino) == identity:
            calls["c"] = calls.get("c", 0) + 1
            if calls["c"] >= 2:  # the file grew while it was being read (the look after the read)
                values = list(result)
                values[6] += 10  # st_size
                return os.stat_result(values)
        return result

    monkeypatch.setattr("loader.ingest.sources.os.fstat", fstat)
    report = ingest_paths(_settings(db_url, tmp_path, fake_openai), [root], progress=delete_b)
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert reasons["b.md"].startswith("deleted during the run")
    assert reasons["c.md"].startswith("changed while being read")
    assert set(_documents(conn)) == {"a.md"}


def test_embedding_api_failure_keeps_the_previous_version(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    before = _documents(conn)
    chunks_before = conn.execute("SELECT id, content FROM kb.chunks ORDER BY id").fetchall()
    conn.rollback()

    (root / "notes.txt").write_text("Rewritten notes about checkpoints.\n")
    (root / "page.html").unlink()
    fake_openai.script("/v1/embeddings", Reply({"error": {"message": "down"}}, status=500))
    report = ingest_paths(settings, [root], prune=True)
    assert report.aborted is not None
    assert "HTTP 500" in report.aborted
    assert report.exit_code == 2
    assert report.pruned == 0  # an aborted run prunes nothing
    assert _documents(conn) == before
    assert conn.execute("SELECT id, content FROM kb.chunks ORDER BY id").fetchall() == chunks_before
    _check_whole(conn)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            Reply({"object": "list", "data": [], "model": "m"}),
            "returned 0 vectors for",
        ),
        (
            Reply(
                {
                    "object": "list",
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.5] * 3}],
                    "model": "m",
                }
            ),
            "returned 3-dimensional vectors",
        ),
    ],
)
def test_a_misbehaving_model_stops_the_run_before_anything_is_written(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    reply: Reply,
    message: str,
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "one.txt").write_text("Only one chunk here.")
    fake_openai.script("/v1/embeddings", reply)
    report = ingest_paths(_settings(db_url, tmp_path, fake_openai), [root])
    assert report.aborted is not None
    assert message in report.aborted
    assert conn.execute("SELECT count(*) FROM kb.documents").fetchone() == (0,)


def test_unreachable_api_via_the_cli_exits_2_and_writes_nothing(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    env = {**_env(settings), "PGKB_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1"}
    result = CliRunner().invoke(cli, ["ingest", str(root), "--json"], env=env)
    assert result.exit_code == 2, result.output
    assert "unreachable" in result.output
    assert conn.execute("SELECT count(*) FROM kb.documents").fetchone() == (0,)


def test_run_level_configuration_errors_stop_before_any_write(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    with pytest.raises(ConfigError, match="does not exist"):
        ingest_paths(settings, [root, tmp_path / "nope"])
    ingest_paths(settings, [root])
    count = conn.execute("SELECT count(*), max(updated_at) FROM kb.documents").fetchone()
    conn.rollback()
    with pytest.raises(ModelMismatchError, match="is not the database's active model"):
        ingest_paths(settings.replace(embedding_dims=16), [root])
    with pytest.raises(ConfigError, match="exceeds its input limit"):
        ingest_paths(settings.replace(chunk_tokens=300, embedding_max_input_tokens=256), [root])
    assert conn.execute("SELECT count(*), max(updated_at) FROM kb.documents").fetchone() == count


def test_cli_json_summary_exit_codes_and_meta(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    (root / "bad.txt").write_bytes(b"\x00\x00")
    env = _env(_settings(db_url, tmp_path, fake_openai))
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["ingest", str(root), "--json", "--category", "ops", "--meta", "owner=dba", "--no-wait"],
        env=env,
    )
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert summary["files_seen"] == 6
    assert summary["new"] == 5
    assert summary["failed"] == [
        {"source": str((root / "bad.txt").resolve()), "reason": summary["failed"][0]["reason"]}
    ]
    assert "binary content" in summary["failed"][0]["reason"]
    for key in ("chunks_written", "embeddings_computed", "embeddings_reused", "pruned"):
        assert key in summary
    assert {"scan", "read", "extract", "chunk", "embed", "write", "total"} <= set(
        summary["seconds"]
    )
    owners = conn.execute("SELECT DISTINCT metadata->>'owner', category FROM kb.documents")
    assert owners.fetchall() == [("dba", "ops")]
    conn.rollback()

    (root / "bad.txt").unlink()
    again = runner.invoke(cli, ["ingest", str(root), "--category", "ops", "--meta", "owner=dba"],
                          env=env)  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "5 unchanged" in again.stderr
    bad_meta = runner.invoke(cli, ["ingest", str(root), "--meta", "novalue"], env=env)
    assert bad_meta.exit_code == 2
    assert "is not key=value" in bad_meta.output
    missing = runner.invoke(cli, ["ingest", str(tmp_path / "absent")], env=env)
    assert missing.exit_code == 2
    assert "does not exist" in missing.output


def test_the_ingestion_lock_names_who_holds_it(db_url: str) -> None:
    """Ingest and reembed share one lock (loader.ingest.writer.ingest_lock); a refused run is
    told which run is in the way, by its name and backend pid."""
    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        pid = first.info.backend_pid
        with ingest_lock(first, what="pgkb models reembed"):
            with pytest.raises(PgkbError) as refused, ingest_lock(second, wait=False):
                pass
            assert refused.value.message == (
                "another pgkb ingest is running on this database "
                f"(backend pid {pid}: pgkb models reembed)"
            )
        with ingest_lock(first):
            with (
                pytest.raises(PgkbError) as refused,
                ingest_lock(second, wait=False, what="pgkb models reembed"),
            ):
                pass
            assert refused.value.message == (
                f"pgkb ingest (backend pid {pid}) is writing to this knowledge base; "
                "pgkb models reembed does not run beside it"
            )
            assert "--wait" in str(refused.value.hint)
        with ingest_lock(second, wait=False, what="pgkb models reembed"):  # released: free again
            pass


def test_a_second_run_waits_or_refuses(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, pg_url: str
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    holder = psycopg.connect(db_url, autocommit=True)
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK_KEY,))
        result = CliRunner().invoke(cli, ["ingest", str(root), "--no-wait"], env=_env(settings))
        assert result.exit_code == 2
        assert "another pgkb ingest is running on this database (backend pid" in result.output

        # events, not a sleep: the lock is released only once the run says it is waiting
        waiting, released = threading.Event(), threading.Event()

        def progress(event: str, info: dict[str, Any]) -> None:
            if event == "waiting":
                waiting.set()

        def release() -> None:
            waiting.wait(60)
            holder.execute("SELECT pg_advisory_unlock(%s)", (INGEST_LOCK_KEY,))
            released.set()

        releaser = threading.Thread(target=release)
        releaser.start()
        report = ingest_paths(settings, [root], wait=True, progress=progress)
        releaser.join()
        assert waiting.is_set()  # it reported the other run and waited for it
        assert report.new == 5
    finally:
        holder.close()


def test_two_runs_at_once_never_interleave(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _write_docs(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    reports: list[Any] = []

    def run() -> None:
        reports.append(ingest_paths(settings, [root]))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outcomes = sorted((r.new, r.unchanged) for r in reports)
    assert outcomes == [(0, 5), (5, 0)]
    _check_whole(conn)


def test_in_memory_documents(
    conn: psycopg.Connection[Any], tmp_path: Path, fake_openai: FakeOpenAI, db_url: str
) -> None:
    settings = _settings(db_url, tmp_path, fake_openai)
    embedder = OpenAIEmbedder(
        "fake-embed", fake_openai.dims, base_url=fake_openai.base_url, max_retries=0
    )
    docs = [
        SourceDocument("doc-1", "Aspirin", "It inhibits platelet aggregation."),
        SourceDocument(
            "doc-2",
            "Sleep",
            "",
            sections=[Section(("Sleep", "Effects"), "Sleep deprivation impairs memory.")],
            metadata={"year": 2020},
        ),
    ]
    first = ingest_documents(conn, docs, embedder, settings, category="scifact")
    assert (first.new, first.chunks_written) == (2, 2)
    rows = conn.execute(
        "SELECT d.source_uri, d.category, d.metadata, c.heading_path FROM kb.documents d "
        "JOIN kb.chunks c ON c.document_id = d.id ORDER BY 1"
    ).fetchall()
    conn.rollback()
    # a document without headings is found by its title's words (the title leads its path)
    assert rows == [
        ("doc-1", "scifact", {}, "Aspirin"),
        ("doc-2", "scifact", {"year": 2020}, "Sleep > Effects"),
    ]
    found = conn.execute("SELECT source_uri FROM kb.keyword_search('aspirin')").fetchall()
    conn.rollback()
    assert found == [("doc-1",)]
    again = ingest_documents(conn, docs, embedder, settings, category="scifact")
    assert (again.unchanged, again.new, again.changed) == (2, 0, 0)
    changed = [SourceDocument("doc-1", "Aspirin", "Aspirin reduces fever.")]
    third = ingest_documents(conn, changed, embedder, settings, category="scifact")
    assert third.changed == 1
    _check_whole(conn)


@pytest.mark.slow
def test_kill_9_mid_run_leaves_every_document_whole(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    import signal
    import subprocess
    import sys

    from tests.fake_openai import Request, fake_vector

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(40):
        body = "\n\n".join(f"Document {i} paragraph {p} about topic {i * p}." for p in range(3))
        (root / f"doc{i:02}.md").write_text(f"# Doc {i}\n\n{body}\n")

    def slow(request: Request) -> Reply:
        data = [
            {"object": "embedding", "index": n, "embedding": fake_vector(t, fake_openai.dims)}
            for n, t in enumerate(request.body["input"])
        ]
        return Reply({"object": "list", "data": data, "model": "m"}, delay=0.25)

    fake_openai.script("/v1/embeddings", *[slow] * 500)
    settings = _settings(db_url, tmp_path, fake_openai)
    env = {**os.environ, **_env(settings), "PGKB_EMBEDDING_BATCH_SIZE": "2"}
    log = tmp_path / "ingest.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "ingest", str(root)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 120
        written = 0
        while time.monotonic() < deadline and process.poll() is None:
            row = conn.execute("SELECT count(*) FROM kb.documents").fetchone()
            conn.rollback()
            written = row[0] if row else 0
            if written >= 3:
                break
            time.sleep(0.05)
        assert process.poll() is None, log.read_text()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    documents = conn.execute("SELECT count(*) FROM kb.documents").fetchone()
    conn.rollback()
    assert documents is not None
    assert 3 <= documents[0] < 40
    _check_whole(conn)

    report = ingest_paths(settings, [root])  # the lock died with the killed run's connection
    assert report.new + report.unchanged == 40
    assert report.unchanged == documents[0]
    _check_whole(conn)


@pytest.mark.model
def test_real_model_ingest_of_manual_pages(
    db_url: str, tmp_path: Path, embedder: Any, conn: psycopg.Connection[Any]
) -> None:
    from loader.resources import sample_corpus_dir

    pages = ["indexes-types.html", "routine-vacuuming.html", "sql-notify.html"]
    settings = load_settings(env={}, database_url=db_url, data_dir=str(tmp_path / "data"))
    report = ingest_paths(settings, [sample_corpus_dir() / p for p in pages], embedder=embedder)
    assert (report.new, report.failed) == (3, [])
    _check_whole(conn)
    model = conn.execute("SELECT name, dims, provider FROM kb.active_model()").fetchone()
    assert model == ("sentence-transformers/all-MiniLM-L6-v2", 384, "local")
    longest = conn.execute("SELECT max(token_count) FROM kb.chunks").fetchone()
    assert longest is not None
    from loader.providers.embeddings import chunk_size

    assert longest[0] <= chunk_size(settings, embedder) == 200  # unset: 200, MiniLM reads 256
    query = embedder.embed_query("Which index type can handle range queries on sortable data?")
    best = conn.execute(
        """
        SELECT d.source_uri, c.heading_path
          FROM kb.embeddings e
          JOIN kb.chunks c ON c.id = e.chunk_id
          JOIN kb.documents d ON d.id = c.document_id
         ORDER BY e.embedding::vector(384) <=> %s::vector(384)
         LIMIT 1
        """,
        (query,),
    ).fetchone()
    assert best is not None
    assert best[0].endswith("indexes-types.html")
    assert "B-Tree" in best[1]


@pytest.mark.slow
def test_quickstart_ingests_the_sample_corpus(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    from loader.db.connect import connect
    from loader.db.demo import demo_url
    from loader.resources import sample_corpus_dir

    env = _env(_settings(db_url, tmp_path, fake_openai, chunk_tokens=200, chunk_overlap=32))
    # the fake server's embeddings are hash noise: the keyword leg finds the page here, so the
    # noise leg weighs half of it (the default gives the real model's vector leg twice)
    env["PGKB_VECTOR_WEIGHT"] = "0.5"
    try:
        result = CliRunner().invoke(cli, ["quickstart"], env=env)
        assert result.exit_code == 0, result.output
        pages = len(list(sample_corpus_dir().glob("*.html")))
        assert f"{pages} files: {pages} new" in result.stderr
        assert f"documents: {pages}" in result.stdout
        # then it answers its two questions: the unanswerable one gets "I don't know"
        asked = result.stdout.split("$ pgkb ask ")[1:]
        assert len(asked) == 2
        assert "Oracle Data Guard" in asked[1] and "I don't know" in asked[1]
        # the answerable one is answered from CREATE INDEX's page, by the passage on CONCURRENTLY
        assert "I don't know" not in asked[0]
        assert "[CREATE INDEX] " + str(sample_corpus_dir() / "sql-createindex.html") in asked[0]
        assert "build the index without taking any locks" in asked[0]
        again = CliRunner().invoke(cli, ["quickstart"], env=env)
        assert again.exit_code == 0, again.output
        assert f"{pages} unchanged" in again.stderr
        # the sample went into the demo database: the user's knowledge base holds none of it
        assert conn.execute("SELECT count(*) FROM kb.documents").fetchone() == (0,)
        with connect(demo_url(db_url)) as demo:
            _check_whole(demo)
            assert demo.execute("SELECT count(*) FROM kb.documents").fetchone() == (pages,)
    finally:
        removed = CliRunner().invoke(cli, ["quickstart", "--remove"], env=env)
    assert removed.exit_code == 0, removed.output
    assert "removed the demo database" in removed.stdout
