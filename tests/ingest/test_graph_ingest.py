"""The graph built by ingestion, on a real database: metadata, link edges, pending links, cycles,
re-ingestion, mentions, the chat model's metadata and edges (against the fake OpenAI server),
and the CLI (pgkb docs, pgkb docs graph)."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.graph import catalogue
from loader.graph.store import GraphStats, enrich_documents
from loader.ingest.pipeline import ingest_paths
from loader.settings import Settings, load_settings
from tests.fake_openai import FakeOpenAI, Reply, Request, chat_reply


def _settings(db_url: str, tmp_path: Path, fake: FakeOpenAI, **more: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "data_dir": str(tmp_path / "data"),
        "embedding_provider": "openai",
        "embedding_model": "fake-embed",
        "embedding_dims": fake.dims,
        "embedding_base_url": fake.base_url,
        "embedding_max_retries": 0,
        "chunk_tokens": 60,
        "chunk_overlap": 0,
    }
    values.update(more)
    return load_settings(env={}, **values)


def _chat(settings: Settings, fake: FakeOpenAI, timeout: float = 5.0) -> Settings:
    return settings.replace(
        chat_base_url=fake.base_url,
        chat_model="fake-chat",
        chat_api_key="sk-test",
        chat_max_retries=0,
        chat_timeout=timeout,
    )


def page(title: str, body: str, *, nav: str = "") -> str:
    return (
        f"<html><head><title>{title}</title></head><body>"
        f'<div class="navheader">{nav}</div>'
        f"<h1>{title}</h1>{body}"
        f'<div class="navfooter">{nav}</div></body></html>'
    )


def _corpus(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    nav = '<a href="b.html">Next</a><a href="index.html">Home</a>'
    (root / "a.html").write_text(
        page(
            "Alpha Page",
            '<div class="toc"><a href="#s1">Setup</a><a href="b.html#x">B in toc</a></div>'
            '<h2 id="s1">Setup</h2><p>Alpha explains setup. Read <a href="b.html#part">the beta '
            'page</a> and <a href="sub/c.html">gamma</a>. Also <a href="a.html#top">this page</a>'
            ' and <a href="https://example.com/">a site</a>.</p>'
            "<h2>Usage</h2><p>Alpha usage is simple.</p>",
            nav=nav,
        )
    )
    (root / "b.html").write_text(
        page("Beta Page", '<p>Beta goes back to <a href="a.html">alpha</a>.</p>', nav=nav)
    )


def _edges(conn: psycopg.Connection[Any]) -> set[tuple[str, str, str, str]]:
    rows = conn.execute(
        "SELECT s.title, t.title, r.origin, coalesce(r.evidence, '')"
        "  FROM kb.document_relations r JOIN kb.documents s ON s.id = r.source_id"
        "  JOIN kb.documents t ON t.id = r.target_id"
    ).fetchall()
    conn.rollback()
    return {tuple(r) for r in rows}  # type: ignore[misc]


def test_links_become_edges_and_pending_links_resolve_later(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    report = ingest_paths(settings, [root])
    assert report.exit_code == 0 and report.new == 2
    assert report.graph["link_edges"] == 2 and report.graph["links"] == 3
    # nav, toc, self-links, fragments and other sites are not edges; the link cycle is fine
    assert _edges(conn) == {
        ("Alpha Page", "Beta Page", "link", "the beta page"),
        ("Beta Page", "Alpha Page", "link", "alpha"),
    }
    pending = conn.execute(
        "SELECT target_uri, href, anchor FROM kb.document_links ORDER BY 1"
    ).fetchall()
    assert (str(root.resolve() / "sub" / "c.html"), "sub/c.html", "gamma") in pending
    # metadata: summary, outline with chunk ranges, type, entities
    summary, toc, origin = conn.execute(
        "SELECT summary, toc, metadata_origin FROM kb.documents WHERE title = 'Alpha Page'"
    ).fetchone()  # type: ignore[misc]
    conn.rollback()
    assert summary.startswith("Alpha explains setup.") and origin == "heuristic"
    assert [e["title"] for e in toc] == ["Setup", "Usage"]
    assert toc[0]["chunk_start"] == 0 and toc[-1]["chunk_end"] >= toc[-1]["chunk_start"]

    # the linked file arrives later: the pending link becomes an edge
    (root / "sub").mkdir()
    (root / "sub" / "c.html").write_text(page("Gamma Page", "<p>Gamma stands alone.</p>"))
    ids_before = dict(conn.execute("SELECT title, id FROM kb.documents").fetchall())
    conn.rollback()
    report = ingest_paths(settings, [root])
    assert report.new == 1 and report.unchanged == 2
    assert ("Alpha Page", "Gamma Page", "link", "gamma") in _edges(conn)

    # editing Alpha replaces its outgoing edges only; Beta's edge to it stays (same id)
    (root / "a.html").write_text(page("Alpha Page", "<p>Alpha now links nowhere.</p>"))
    report = ingest_paths(settings, [root])
    assert report.changed == 1
    assert _edges(conn) == {("Beta Page", "Alpha Page", "link", "alpha")}
    ids_after = dict(conn.execute("SELECT title, id FROM kb.documents").fetchall())
    assert ids_after["Alpha Page"] == ids_before["Alpha Page"]
    # a re-run with no change regenerates nothing
    report = ingest_paths(settings, [root])
    assert report.unchanged == 3 and report.graph["link_edges"] == 0


def test_mentions_of_file_names_and_titles(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "md"
    root.mkdir()
    (root / "policy.md").write_text(
        "# Remote Work Security Policy\n\nEmployees shall lock screens.\n"
    )
    (root / "faq.md").write_text(
        "# FAQ\n\nSee policy.md for the rules.\n\nThe remote work security policy applies abroad.\n"
    )
    settings = _settings(db_url, tmp_path, fake_openai)
    report = ingest_paths(settings, [root])
    assert report.graph["mention_edges"] == 1
    assert _edges(conn) == {
        ("FAQ", "Remote Work Security Policy", "mention", "See policy.md for the rules.")
    }
    # a new document is found by the older documents that mention it
    (root / "later.md").write_text("# Later\n\nNothing here.\n")
    (root / "z-guide.md").write_text("# Travel Laptop Handling Guide\n\nCarry it.\n")
    (root / "old.md").write_text("# Old\n\nRead the Travel Laptop Handling Guide first.\n")
    ingest_paths(settings, [root / "old.md"])
    ingest_paths(settings, [root])
    assert ("Old", "Travel Laptop Handling Guide", "mention",
            "Read the Travel Laptop Handling Guide first.") in _edges(conn)  # fmt: skip


# --- the chat model -----------------------------------------------------------------------------


def _doc_ids(conn: psycopg.Connection[Any]) -> dict[str, str]:
    ids = {t: str(i) for t, i in conn.execute("SELECT title, id FROM kb.documents").fetchall()}
    conn.rollback()
    return ids


def _prompt(request: Request) -> str:
    return str(request.body["messages"][-1]["content"])


def test_chat_model_metadata_and_validated_edges(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])  # no model: deterministic
    ids = _doc_ids(conn)
    (root / "a.html").write_text(page("Alpha Page", "<p>Alpha, rewritten, about beta.</p>"))

    def reply(request: Request) -> Reply:
        prompt = _prompt(request)
        assert "D1: Beta Page" in prompt  # the only candidate
        return chat_reply(
            "<think>hmm</think>```json\n"
            + json.dumps(
                {
                    "summary": "Alpha, as the model sees it.",
                    "doc_type": "manual",
                    "key_entities": ["alpha"],
                    "toc": [{"title": "", "level": 1, "chunk_start": 5, "chunk_end": -3}],
                    "relations": [
                        {"to": "D1", "relation_type": "supersedes", "evidence": "newer"},
                        {"to": "D9", "relation_type": "references"},  # hallucinated
                        {"to": ids["Alpha Page"], "relation_type": "references"},  # self-loop
                        {"to": "00000000-0000-0000-0000-000000000001", "relation_type": "depicts"},
                        {"to": "D1", "relation_type": "explains"},  # unknown type
                    ],
                }
            )
            + "\n```"
        )

    fake_openai.script("/v1/chat/completions", reply)
    report = ingest_paths(_chat(settings, fake_openai), [root])
    assert report.changed == 1
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    assert request.body["temperature"] == 0 and request.body["model"] == "fake-chat"
    assert report.graph["llm_documents"] == 1 and report.graph["llm_edges"] == 1
    row = conn.execute(
        "SELECT summary, doc_type, key_entities, toc, metadata_origin FROM kb.documents"
        " WHERE title = 'Alpha Page'"
    ).fetchone()
    assert row == (
        "Alpha, as the model sees it.",
        "manual",
        ["alpha"],
        [{"title": "Section 1", "level": 1, "chunk_start": 0, "chunk_end": 0}],
        "llm",
    )
    assert ("Alpha Page", "Beta Page", "llm", "newer") in _edges(conn)


@pytest.mark.parametrize(
    "bad",
    [
        Reply(raw=b'{"choices": [{"message": {"content": "{\\"summary\\": \\"trunc'),
        Reply(status=500, body={"error": {"message": "boom"}}),
        chat_reply('{"summary": "S", "toc": [{"chunk_start": 1,'),
        chat_reply("```json\n" + json.dumps({"summary": "x" * 150_000}) + "\n```"),
        chat_reply(json.dumps({"doc_type": "manual"})),
        Reply(delay=3.0),
    ],
    ids=["truncated-http", "http-500", "truncated-json", "enormous", "no-summary", "timeout"],
)
def test_any_model_failure_keeps_the_deterministic_metadata(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    bad: Reply,
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    fake_openai.script("/v1/chat/completions", bad, bad)
    settings = _chat(_settings(db_url, tmp_path, fake_openai), fake_openai, timeout=1.0)
    report = ingest_paths(settings, [root])
    assert report.exit_code == 0 and report.new == 2
    assert report.graph["llm_fallbacks"] == 2 and report.graph["llm_documents"] == 0
    rows = conn.execute(
        "SELECT metadata_origin, summary <> '', toc <> '[]' FROM kb.documents"
    ).fetchall()
    assert rows == [("heuristic", True, True)] * 2
    assert report.graph["link_edges"] == 2


def test_one_document_means_no_candidates(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "one"
    root.mkdir()
    (root / "solo.md").write_text("# Solo\n\nThe only document.\n")
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(
            json.dumps(
                {"summary": "Solo.", "relations": [{"to": "D1", "relation_type": "references"}]}
            )
        ),
    )
    report = ingest_paths(_chat(_settings(db_url, tmp_path, fake_openai), fake_openai), [root])
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    assert "Candidate related documents: none" in _prompt(request)
    assert report.graph["llm_documents"] == 1 and report.graph["llm_edges"] == 0


def test_a_document_deleted_mid_generation_is_skipped(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    ids = _doc_ids(conn)

    def delete_then_answer(request: Request) -> Reply:
        with psycopg.connect(db_url, autocommit=True) as other:
            other.execute("DELETE FROM kb.documents WHERE id = %s", (ids["Alpha Page"],))
        return chat_reply(
            json.dumps(
                {"summary": "Too late.", "relations": [{"to": "D1", "relation_type": "references"}]}
            )
        )

    fake_openai.script(
        "/v1/chat/completions", delete_then_answer, chat_reply(json.dumps({"summary": "Beta."}))
    )
    stats = GraphStats()
    enrich_documents(
        conn, _chat(settings, fake_openai), [ids["Alpha Page"], ids["Beta Page"]], stats
    )
    assert stats.llm_skipped == 1 and stats.llm_documents == 1
    assert _doc_ids(conn).keys() == {"Beta Page"}


def test_a_ten_thousand_chunk_document_is_bounded_work(
    conn: psycopg.Connection[Any], db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    doc = conn.execute(
        "INSERT INTO kb.documents (source_uri, title, content_sha) VALUES ('/big.txt', 'Big', 'x')"
        " RETURNING id::text"
    ).fetchone()
    assert doc is not None
    conn.execute(
        "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, token_count)"
        " SELECT %s, i, repeat('line ' || i || ' of the big log. ', 20), 's' || i, 100"
        "   FROM generate_series(0, 9999) i",
        (doc[0],),
    )
    conn.execute(
        "INSERT INTO kb.documents (source_uri, title, content_sha, summary) VALUES"
        " ('/other.txt', 'Other log', 'y', 'the big log')"
    )
    conn.commit()
    settings = _chat(_settings(db_url, tmp_path, fake_openai), fake_openai)
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(
            json.dumps(
                {
                    "summary": "A log.",
                    "toc": [{"title": "All", "chunk_start": 0, "chunk_end": 10**9}],
                }
            )
        ),
    )
    stats = GraphStats()
    enrich_documents(conn, settings, [doc[0]], stats)
    (request,) = fake_openai.requests_to("/v1/chat/completions")
    assert len(json.dumps(request.body)) < 12_000  # title, outline, first chunks within budget
    toc = conn.execute("SELECT toc FROM kb.documents WHERE id = %s", (doc[0],)).fetchone()
    assert toc == ([{"title": "All", "level": 1, "chunk_start": 0, "chunk_end": 9999}],)


# --- reading the graph: the agent's catalogue, ask's related documents, the CLI ------------------


def test_catalogue_and_related_documents_honour_the_category(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root / "a.html"], category="public")
    ingest_paths(settings, [root / "b.html"], category="secret")
    ids = _doc_ids(conn)
    nodes = catalogue.catalogue_for_question(conn, "alpha setup")
    assert [n.title for n in nodes][:2] == ["Alpha Page", "Beta Page"]
    text = catalogue.format_catalogue(nodes)
    assert (
        "[1] Alpha Page (general; id " in text
        and "Edges: [1] references [2]; [2] references [1]" in text
    )
    scoped = catalogue.catalogue_for_question(conn, "alpha setup", filters={"category": "public"})
    assert [n.title for n in scoped] == ["Alpha Page"]
    alpha, beta = uuid.UUID(ids["Alpha Page"]), uuid.UUID(ids["Beta Page"])
    assert catalogue.related_from_graph(conn, [alpha]) == [
        (beta, "Beta Page", str((root / "b.html").resolve()), "references")
    ]
    assert catalogue.related_from_graph(conn, [alpha], filters={"category": "public"}) == []


def test_cli_docs_and_graph(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    env = {"PGKB_DATABASE_URL": db_url, "PGKB_DATA_DIR": str(tmp_path / "data")}
    runner = CliRunner()
    listed = runner.invoke(cli, ["docs", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["title"], r["edges_out"], r["edges_in"]) for r in rows] == [
        ("Alpha Page", 1, 1),
        ("Beta Page", 1, 1),
    ]
    shown = runner.invoke(cli, ["docs", "show", "a.html"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "Outline (chunks)" in shown.stdout and "Links to (1)" in shown.stdout
    assert "sub/c.html" in shown.stdout  # a link to a file never ingested
    tree = runner.invoke(cli, ["docs", "graph", "b.html"], env=env)
    assert tree.exit_code == 0, tree.output
    assert "references" in tree.stdout.splitlines()[1] and "Alpha Page" in tree.stdout
    dot = runner.invoke(cli, ["docs", "graph", "a.html", "--format", "dot"], env=env)
    assert dot.stdout.startswith("digraph pgkb {") and "references" in dot.stdout
    as_json = runner.invoke(
        cli, ["docs", "graph", str(root / "a.html"), "--format", "json"], env=env
    )
    assert [n["distance"] for n in json.loads(as_json.stdout)] == [0, 1]
    missing = runner.invoke(cli, ["docs", "graph", "nope.html"], env=env)
    assert missing.exit_code == 1 and "no document 'nope.html'" in missing.output
    too_deep = runner.invoke(cli, ["docs", "graph", "a.html", "--depth", "4"], env=env)
    assert too_deep.exit_code == 2


def test_concurrent_readers_see_whole_documents(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """While a document is re-ingested, explore_graph sees either its old edges or its new ones."""
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(db_url, autocommit=True) as reader:
            start = reader.execute(
                "SELECT id FROM kb.documents WHERE title = 'Alpha Page'"
            ).fetchone()
            while not stop.is_set():
                row = reader.execute(
                    "SELECT count(*) FROM kb.document_relations WHERE source_id = %s", start
                ).fetchone()
                seen.append(int(row[0]) if row else -1)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for i in range(3):
            body = f'<p>Alpha <a href="b.html">beta</a> v{i}.</p>'
            (root / "a.html").write_text(page("Alpha Page", body))
            ingest_paths(settings, [root])
    finally:
        stop.set()
        thread.join()
    assert set(seen) <= {1}
