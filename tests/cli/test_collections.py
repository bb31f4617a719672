"""Collections end to end: a migration moves an existing knowledge base into ``default`` without
re-embedding; ``pgkb ingest --collection`` puts the same folder into two collections; the read
and maintenance commands take ``--collection``; the graph links within a collection only unless
asked; ``pgkb db grant --collection``, ``grants`` and ``revoke``; and the MCP reader bound to a
role granted one collection never shows the other, whatever a tool is asked.

One corpus per module (the real local model, five small files ingested into ``hr`` and ``eng``).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from click.testing import CliRunner, Result

from loader.cli import cli
from loader.settings import Settings
from tests.helpers import create_database, drop_database, migrate
from tests.serve_fixtures import _create_role, _drop_role, role_url

pytestmark = pytest.mark.model

HR = {
    "leave.md": "# Parental leave\n\nParents receive sixteen weeks of paid parental leave. "
    "The index of policies lists the rest; see [the readme](readme.md) and "
    "[the index build](createindex.md).\n",
    "readme.md": "# HR readme\n\nAsk the people team about any policy or leave.\n",
}
ENG = {
    "createindex.md": "# CREATE INDEX\n\nCREATE INDEX CONCURRENTLY builds an index on a "
    "zanzibarite table without locking out writes; see [leave](leave.md).\n",
    "readme.md": "# Engineering readme\n\nDeploy the quokka-flux service; the policy index is "
    "in the wiki.\n",
}


@dataclasses.dataclass
class Kb:
    settings: Settings
    url: str
    root: Path
    reader: str
    reader_url: str

    def env(self, url: str | None = None) -> dict[str, str]:
        return {
            "PGKB_DATABASE_URL": url or self.url,
            "PGKB_DATA_DIR": str(self.settings.data_dir),
            "PGKB_SOURCE_ROOT": str(self.root),
        }

    def run(self, *args: str, url: str | None = None) -> Result:
        return CliRunner().invoke(cli, list(args), env=self.env(url), catch_exceptions=False)


@pytest.fixture(scope="module")
def kb(pg_url: str, template_db: str, embedder: Any, tmp_path_factory: Any) -> Iterator[Kb]:
    from loader.ingest.pipeline import ingest_paths

    root: Path = tmp_path_factory.mktemp("collections")
    for folder, docs in (("hr", HR), ("eng", ENG)):
        (root / folder).mkdir()
        for name, text in docs.items():
            (root / folder / name).write_text(text)
    name = f"pgkb_coll_{uuid.uuid4().hex[:8]}"
    reader = f"hr_svc_{uuid.uuid4().hex[:6]}"
    url = create_database(pg_url, name, template=template_db)
    settings = Settings(
        database_url=url, data_dir=tmp_path_factory.mktemp("coll-kb"), source_root=root
    )
    try:
        # each folder as its own collection, its files under the same names (readme.md twice)
        for folder in ("hr", "eng"):
            report = ingest_paths(
                settings.replace(source_root=root / folder), [root / folder],
                embedder=embedder, collection=folder,
            )  # fmt: skip
            assert report.exit_code == 0, report.to_dict()
        _create_role(pg_url, reader)
        yield Kb(settings, url, root, reader, role_url(url, reader))
    finally:
        drop_database(pg_url, name)
        _drop_role(pg_url, reader)


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_migration_moves_an_existing_knowledge_base_into_default_without_reembedding(
    empty_db_url: str, pg_url: str
) -> None:
    old_reader = f"old_reader_{uuid.uuid4().hex[:6]}"
    _create_role(pg_url, old_reader)
    try:
        migrate(empty_db_url, "0008")  # the last release before the baseline 0036
        with psycopg.connect(empty_db_url) as conn:
            conn.execute("SELECT kb.register_model('m', 3, 'test')")
            doc = conn.execute(
                "INSERT INTO kb.documents (source_uri, title, content_sha) "
                "VALUES ('a.md', 'A', 'x') RETURNING id"
            ).fetchone()
            assert doc is not None
            chunk = conn.execute(
                "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, "
                "token_count) VALUES (%s, 0, 'alpha text', 's', 2) RETURNING id",
                (doc[0],),
            ).fetchone()
            assert chunk is not None
            conn.execute(
                "INSERT INTO kb.embeddings SELECT %s, id, '[0.1,0.2,0.3]' FROM kb.embedding_models",
                (chunk[0],),
            )
            conn.execute(f'GRANT kb_reader TO "{old_reader}"')
            conn.commit()
        migrate(empty_db_url, "head")
        with psycopg.connect(empty_db_url) as conn:
            assert conn.execute(
                "SELECT d.collection, c.id, e.embedding::text FROM kb.documents d "
                "JOIN kb.chunks c ON c.document_id = d.id JOIN kb.embeddings e ON e.chunk_id = c.id"
            ).fetchall() == [("default", chunk[0], "[0.1,0.2,0.3]")]
            # the reader of before keeps reading everything
            assert conn.execute(
                "SELECT collection FROM kb.collection_grants WHERE role_name = %s", (old_reader,)
            ).fetchall() == [(None,)]
            # a source may now be stored in two collections, once in each
            conn.execute("INSERT INTO kb.collections (name) VALUES ('other')")
            conn.execute(
                "INSERT INTO kb.documents (source_uri, title, content_sha, collection) "
                "VALUES ('a.md', 'A', 'x', 'other')"
            )
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(
                    "INSERT INTO kb.documents (source_uri, title, content_sha, collection) "
                    "VALUES ('a.md', 'A', 'x', 'other')"
                )
    finally:
        _drop_role(pg_url, old_reader)


def test_the_same_folder_names_in_two_collections_and_the_commands_per_collection(
    kb: Kb,
) -> None:
    listed = _json(kb.run("collections", "--json"))
    assert [(c["name"], c["documents"]) for c in listed] == [
        ("default", 0), ("eng", 2), ("hr", 2),
    ]  # fmt: skip
    with psycopg.connect(kb.url) as conn:
        sources = conn.execute(
            "SELECT collection, source_uri FROM kb.documents ORDER BY 1, 2"
        ).fetchall()
    assert sources == [
        ("eng", "createindex.md"), ("eng", "readme.md"), ("hr", "leave.md"), ("hr", "readme.md"),
    ]  # fmt: skip
    hr_docs = _json(kb.run("docs", "list", "--collection", "hr", "--json"))
    assert sorted(d["title"] for d in hr_docs) == ["HR readme", "Parental leave"]
    stats = _json(kb.run("stats", "--collection", "eng", "--json"))
    assert stats["documents"] == 2 and [c["collection"] for c in stats["collections"]] == ["eng"]
    hits = _json(kb.run("search", "readme", "--mode", "keyword", "--collection", "eng", "--json"))
    assert {h["title"] for h in hits} == {"Engineering readme"}
    both = _json(
        kb.run("search", "readme", "--mode", "keyword", "--collection", "eng",
               "--collection", "hr", "--json")
    )  # fmt: skip
    assert {h["title"] for h in both} == {"Engineering readme", "HR readme", "Parental leave"}
    shown = _json(kb.run("docs", "show", "readme.md", "--collection", "hr", "--json"))
    assert shown["title"] == "HR readme"
    stale = _json(kb.run("docs", "stale", "--older-than", "0s", "--collection", "hr", "--json"))
    assert sorted(r["source_uri"] for r in stale) == ["leave.md", "readme.md"]
    missing = kb.run("search", "readme", "--mode", "keyword", "--collection", "nope")
    assert missing.exit_code == 2 and "no collection 'nope'" in missing.stderr
    assert "Traceback" not in missing.output
    bad = kb.run("search", "readme", "--collection", "no good")
    assert bad.exit_code == 2 and "not a collection name" in bad.stderr


def test_the_graph_links_within_a_collection_only(kb: Kb) -> None:
    with psycopg.connect(kb.url) as conn:
        edges = conn.execute(
            "SELECT s.collection, s.source_uri, t.collection, t.source_uri "
            "FROM kb.document_relations r JOIN kb.documents s ON s.id = r.source_id "
            "JOIN kb.documents t ON t.id = r.target_id WHERE r.origin = 'link' ORDER BY 1, 2, 4"
        ).fetchall()
    # leave.md links to readme.md (hr's own) and createindex.md (only in eng: no edge);
    # createindex.md links to leave.md (only in hr: no edge)
    assert edges == [("hr", "leave.md", "hr", "readme.md")]
    walk = _json(kb.run("docs", "graph", "leave.md", "--collection", "hr", "--depth", "3",
                        "--format", "json"))  # fmt: skip
    assert {n["source_uri"] for n in walk} == {"leave.md", "readme.md"}


def test_grant_grants_and_revoke_from_the_command_line(kb: Kb) -> None:
    granted = kb.run("db", "grant", kb.reader, "--read", "--collection", "hr")
    assert granted.exit_code == 0, granted.output
    assert f"-- {kb.reader} reads collection hr" in granted.stdout
    listed = _json(kb.run("db", "grants", kb.reader, "--json"))
    assert [(g["collection"], g["reader"]) for g in listed] == [("hr", True)]
    as_reader = _json(kb.run("collections", "--json", url=kb.reader_url))
    assert [c["name"] for c in as_reader] == ["hr"]
    hits = _json(kb.run("search", "readme policy index", "--mode", "keyword", "--json",
                        url=kb.reader_url))  # fmt: skip
    assert hits and all(h["title"] in ("HR readme", "Parental leave") for h in hits)
    # db status counts what the reader may read; model coverage would count the others
    status = _json(kb.run("db", "status", "--json", url=kb.reader_url))
    hr_docs = next(c["documents"] for c in as_reader if c["name"] == "hr")
    assert status["documents"] == hr_docs and status["embeddings"] is None, status
    # nor may it learn the sizes of what searches read (they count every collection)
    assert "search_reads" not in status and "shared_buffers" not in status, status
    asked = kb.run("search", "readme", "--mode", "keyword", "--collection", "eng",
                   url=kb.reader_url)  # fmt: skip
    assert asked.exit_code == 2 and "no collection 'eng'" in asked.stderr
    nothing = kb.run("db", "grant", kb.reader, "--read", "--collection", "nope")
    assert nothing.exit_code == 2 and "no collection 'nope'; nothing was granted" in nothing.stderr
    # writing a collection is a grant of its own: the role still reads hr only, and now writes it
    writer_scope = kb.run("db", "grant", kb.reader, "--write", "--collection", "hr")
    assert writer_scope.exit_code == 0, writer_scope.output
    assert "reads and writes collection hr" in writer_scope.stdout
    listed = _json(kb.run("db", "grants", kb.reader, "--json"))
    assert [(g["collection"], g["can_write"]) for g in listed] == [("hr", True)]
    revoked = kb.run("db", "revoke", kb.reader, "--collection", "hr")
    assert revoked.exit_code == 0, revoked.output
    assert _json(kb.run("collections", "--json", url=kb.reader_url)) == []
    again = kb.run("db", "revoke", kb.reader, "--collection", "hr")
    assert again.exit_code == 2 and "has no grant of 'hr'" in again.stderr


def test_collections_create_and_drop(kb: Kb, embedder: Any, tmp_path: Path) -> None:
    from loader.ingest.pipeline import ingest_paths

    created = kb.run("collections", "create", "scratch", "--description", "a trial")
    assert created.exit_code == 0, created.output
    folder = tmp_path / "scratch"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nA scratch note about leave.\n")
    report = ingest_paths(kb.settings.replace(source_root=folder), [folder], embedder=embedder,
                          collection="scratch")  # fmt: skip
    assert report.new == 1
    listed = {c["name"]: c for c in _json(kb.run("collections", "--json"))}
    assert listed["scratch"]["documents"] == 1 and listed["scratch"]["description"] == "a trial"
    refused = kb.run("collections", "drop", "scratch")  # no terminal, no --yes: nothing goes
    assert refused.exit_code == 1 and "nothing deleted" in refused.stderr
    dropped = kb.run("collections", "drop", "scratch", "--yes")
    assert dropped.exit_code == 0 and "1 document(s) deleted" in dropped.stderr
    assert "scratch" not in {c["name"] for c in _json(kb.run("collections", "--json"))}


def test_the_mcp_reader_bound_to_one_collection_never_shows_the_other(kb: Kb) -> None:
    from mcp import Client

    from loader.ops.roles import grant, revoke
    from loader.serve.mcp import build_server
    from loader.serve.service import KnowledgeService

    with psycopg.connect(kb.url) as conn:
        grant(conn, kb.reader, read=True, write=False, collections=["hr"])
        eng = {
            str(r[0]): r[1]
            for r in conn.execute(
                "SELECT d.id, min(c.id) FROM kb.documents d JOIN kb.chunks c "
                "ON c.document_id = d.id WHERE d.collection = 'eng' GROUP BY d.id"
            )
        }
        hr_leave = conn.execute(
            "SELECT id FROM kb.documents WHERE collection = 'hr' AND source_uri = 'leave.md'"
        ).fetchone()
        assert hr_leave is not None
    markers = ["zanzibarite", "quokka", "Engineering", "CREATE INDEX", *eng]

    def clean(result: Any, args: dict[str, Any]) -> None:
        data = dict(result.structured_content or {})
        data.pop("query", None)  # the words asked for, echoed
        data.pop("question", None)
        text = json.dumps(data)
        if result.is_error:  # an error may name what was asked for, nothing else
            text += " ".join(getattr(c, "text", "") for c in result.content)
            for asked in args.values():
                text = text.replace(str(asked), "")
        for marker in markers:
            assert marker not in text, (marker, text[:1000])

    hr_titles = {"HR readme", "Parental leave"}

    def titles(key: str) -> Callable[[dict[str, Any]], bool]:
        return lambda data: bool(data[key]) and {d["title"] for d in data[key]} <= hr_titles

    def empty(key: str) -> Callable[[dict[str, Any]], bool]:
        return lambda data: data[key] == []

    def refused(data: dict[str, Any]) -> bool:
        return False  # never called: the call must be a tool error

    # each call, and what it must give: a result (checked) or a tool error (refused)
    calls: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
        ("search", {"query": "zanzibarite index quokka-flux", "limit": 10}, titles("results")),
        ("search", {"query": "readme", "mode": "keyword", "document_ids": list(eng)},
         empty("results")),
        ("list_documents", {}, lambda data: {d["title"] for d in data["documents"]} == hr_titles),
        ("explore_graph", {"document": str(hr_leave[0]), "depth": 3},
         lambda data: {d["title"] for d in data["documents"]} == hr_titles),
        ("explore_graph", {"query": "zanzibarite quokka"}, empty("documents")),
        ("ask", {"question": "How to build an index without locking out writes?"},
         lambda data: {c["title"] for c in data["citations"]} <= hr_titles),
        ("ask", {"question": "How many weeks of paid parental leave do parents receive?"},
         titles("citations")),
        *(("read_document", {"document": doc}, refused) for doc in eng),
        ("read_document", {"document": "createindex.md"}, refused),
        ("explore_graph", {"document": "createindex.md", "depth": 3}, refused),
        *(("neighbor_chunks", {"chunk_id": c, "before": 10, "after": 10}, refused)
          for c in eng.values()),
    ]  # fmt: skip

    settings = dataclasses.replace(kb.settings, database_url=kb.reader_url)
    try:
        with KnowledgeService(settings, pool_size=1) as service:
            server = build_server(service)

            async def session() -> None:
                async with Client(server) as client:
                    for name, args, check in calls:
                        result = await client.call_tool(name, args)
                        clean(result, args)
                        if check is refused:
                            text = " ".join(getattr(c, "text", "") for c in result.content)
                            assert result.is_error, (name, args, result.structured_content)
                            assert "no document" in text or "no chunk" in text, (name, text)
                        else:
                            assert not result.is_error, (name, args, result.content)
                            assert check(result.structured_content), (
                                name, args, result.structured_content,
                            )  # fmt: skip
                    refused_call = await client.call_tool(
                        "search", {"query": "readme", "collections": ["eng"]}
                    )
                    assert refused_call.is_error
                    clean(refused_call, {})
                    read = await client.call_tool("read_document", {"document": "readme.md"})
                    assert not read.is_error
                    assert read.structured_content["title"] == "HR readme"

            anyio.run(session)
    finally:
        with psycopg.connect(kb.url) as conn:
            revoke(conn, kb.reader)


def test_a_server_scoped_to_a_collection_keeps_to_it_for_the_owner_too(kb: Kb) -> None:
    from loader.app import BadRequest, DocumentsRequest, ReadRequest, SearchRequest
    from loader.serve.service import KnowledgeService

    settings = kb.settings.replace(collections="eng")
    with KnowledgeService(settings, pool_size=1) as service:
        listed = service.documents(DocumentsRequest()).to_dict()["documents"]
        assert sorted(d["title"] for d in listed) == ["CREATE INDEX", "Engineering readme"]
        read = service.read(ReadRequest("readme.md")).to_dict()
        assert read["title"] == "Engineering readme"
        with pytest.raises(BadRequest, match="not available"):
            service.search(SearchRequest.of("readme", mode="keyword", collections=["hr"]))
        # a call's collections within the served ones narrow that call only
        narrowed = service.search(
            SearchRequest.of("readme", mode="keyword", collections=["eng"])
        ).to_dict()
        assert {r["title"] for r in narrowed["results"]} == {"Engineering readme"}
        assert service.health()["collections"] == ["eng"]


def test_links_cross_collections_only_when_asked(kb: Kb, embedder: Any, tmp_path: Path) -> None:
    from loader.ingest.pipeline import ingest_paths
    from loader.ops.collections import drop

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "note.md").write_text(
        "# Note\n\nBefore building, read [the index page](createindex.md).\n"
    )
    try:
        report = ingest_paths(
            kb.settings.replace(source_root=folder, graph_across_collections=True), [folder],
            embedder=embedder, collection="notes",
        )  # fmt: skip
        assert report.new == 1
        with psycopg.connect(kb.url) as conn:
            edges = conn.execute(
                "SELECT t.collection, t.source_uri FROM kb.document_relations r "
                "JOIN kb.documents s ON s.id = r.source_id "
                "JOIN kb.documents t ON t.id = r.target_id "
                "WHERE s.collection = 'notes' AND r.origin = 'link'"
            ).fetchall()
        assert edges == [("eng", "createindex.md")]
    finally:
        with psycopg.connect(kb.url) as conn:
            drop(conn, "notes")
