"""Document-graph benchmark: what the graph makes of a corpus and what it adds to ingestion.

    python bench/graph_bench.py --corpus /work/shared/corpora/postgresql-15-docs/html
    python bench/graph_bench.py --corpus ... --with-model 200   # + the chat-model step, fake server

The corpus is copied to a temporary folder and ingested into a fresh embedded database with the
sha256 ``HashEmbedder`` of ``bench/ingest_bench.py`` (the real tokenizer and chunks, fake
vectors: the graph does not depend on them) and no chat model. Prints: ingestion time and the
part spent on the graph, links and edges by origin, documents with an outline and a summary,
the depth-1 neighbourhood of ``--page`` through ``kb.explore_graph`` (pages it links to, pages
linking to it), and what re-ingesting that page after deleting one of its links changes.

``--with-model N`` then re-generates the metadata and edges of N documents with a chat model:
the local fake OpenAI-compatible server of the tests (``tests/fake_openai.py``), answering each
request with a valid JSON reply at once. It measures pgkb's side of the step (candidates, the
request, parsing, validation, writing), not a real model's latency.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ingest_bench
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fake_openai

EDGE_COUNTS = """
SELECT origin, relation_type, count(*) FROM kb.document_relations GROUP BY 1, 2 ORDER BY 1, 2
"""
COVERAGE = """
SELECT count(*), count(*) FILTER (WHERE toc <> '[]'),
       count(*) FILTER (WHERE coalesce(summary, '') <> ''),
       count(*) FILTER (WHERE key_entities <> '{}')
  FROM kb.documents
"""
LINKS = """
SELECT count(*), count(*) FILTER (WHERE EXISTS (
           SELECT 1 FROM kb.documents d WHERE d.source_uri = l.target_uri))
  FROM kb.document_links l
"""
NEIGHBOURS = """
SELECT count(*) FILTER (WHERE g.path -> 0 ->> 'source_id' = %(id)s::text),
       count(*) FILTER (WHERE g.path -> 0 ->> 'target_id' = %(id)s::text),
       count(*) FILTER (WHERE g.distance = 1)
  FROM kb.explore_graph(start_document => %(id)s::uuid, max_depth => 1, max_results => 500) g
 WHERE g.distance = 1
"""
TYPES = "SELECT doc_type, count(*) FROM kb.documents GROUP BY 1 ORDER BY 2 DESC"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--page", default="sql-createindex.html")
    parser.add_argument("--with-model", type=int, default=0, metavar="N")
    args = parser.parse_args()

    import psycopg
    from ingest_bench import HashEmbedder, _fresh_database

    from loader.db.migrations import upgrade
    from loader.ingest.pipeline import ingest_paths
    from loader.settings import load_settings

    workdir = Path(tempfile.mkdtemp(prefix="pgkb-graph-bench-"))
    server = None
    try:
        corpus = workdir / "corpus"
        shutil.copytree(args.corpus, corpus)
        url, server = _fresh_database(argparse.Namespace(database_url=None), workdir)
        upgrade(url)
        embedder = HashEmbedder()
        settings = load_settings(env={}, database_url=url, data_dir=str(workdir / "data"))
        settings = settings.replace(
            embedding_provider="openai", embedding_model=embedder.name, embedding_dims=384
        )
        started = time.perf_counter()
        report = ingest_paths(settings, [corpus], embedder=embedder)
        wall = time.perf_counter() - started
        print(f"| corpus | {len(list(corpus.rglob('*.*')))} files, {report.new} ingested, "
              f"{report.chunks_written} chunks, {len(report.failed)} failed |")  # fmt: skip
        print("| --- | --- |")
        print(f"| ingestion, no chat model | {wall:.1f} s wall |")
        print(f"| of which the graph | {report.seconds.get('graph', 0):.1f} s "
              f"(metadata, links, edges, mention pass) |")  # fmt: skip
        with psycopg.connect(url) as conn:
            total, with_toc, with_summary, with_entities = conn.execute(COVERAGE).fetchone()  # type: ignore[misc]
            print(f"| documents with outline / summary / entities | {with_toc} / {with_summary} / "
                  f"{with_entities} of {total} |")  # fmt: skip
            links, resolved = conn.execute(LINKS).fetchone()  # type: ignore[misc]
            print(f"| distinct page-to-page links kept | {links} ({resolved} to ingested pages) |")
            for origin, kind, count in conn.execute(EDGE_COUNTS).fetchall():
                print(f"| edges {origin}/{kind} | {count} |")
            types = ", ".join(f"{t} {n}" for t, n in conn.execute(TYPES).fetchall())
            print(f"| doc_type (heuristic) | {types} |")
            page = corpus / args.page
            row = conn.execute(
                "SELECT id::text FROM kb.documents WHERE source_uri = %s", (str(page.resolve()),)
            ).fetchone()
            if row:
                out, inc, both = conn.execute(NEIGHBOURS, {"id": row[0]}).fetchone()  # type: ignore[misc]
                print(f"| explore_graph({args.page}, depth 1) | {both} pages: links to {out}, "
                      f"linked from {inc} (a page can be both) |")  # fmt: skip
                before = dict(conn.execute(
                    "SELECT source_id::text, count(*) FROM kb.document_relations GROUP BY 1"
                ).fetchall())  # fmt: skip
                conn.rollback()
                text = page.read_text(encoding="utf-8")
                match = re.search(r'<a class="xref" href="[^"]+"[^>]*>.*?</a>', text, re.S)
                if match:
                    page.write_text(text[: match.start()] + text[match.end() :], encoding="utf-8")
                    again = ingest_paths(settings, [corpus], embedder=embedder)
                    after = dict(conn.execute(
                        "SELECT source_id::text, count(*) FROM kb.document_relations GROUP BY 1"
                    ).fetchall())  # fmt: skip
                    keys = set(before) | set(after)
                    changed = {k for k in keys if before.get(k) != after.get(k)}
                    scope = "only the edited page" if changed <= {row[0]} else "others too"
                    seconds = again.seconds.get("total", 0)
                    print(
                        f"| edit {args.page} (one link removed), re-ingest | "
                        f"{again.changed} changed, {seconds:.1f} s; "
                        f"sources whose edge count changed: {len(changed)} ({scope}) |"
                    )
        if args.with_model:
            _with_model(url, settings, args.with_model)
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _with_model(url: str, settings: Any, limit: int) -> None:
    import psycopg

    from loader.graph.store import GraphStats, enrich_documents
    from tests.fake_openai import FakeOpenAI, Request, chat_reply

    def reply(request: Request) -> Any:
        prompt = str(request.body["messages"][-1]["content"])
        ids = re.findall(r"^(D\d+):", prompt, re.M)
        return chat_reply(json.dumps({
            "summary": "A page of the manual.", "doc_type": "manual",
            "key_entities": ["PostgreSQL"],
            "toc": [{"title": "All", "level": 1, "chunk_start": 0, "chunk_end": 10**6}],
            "relations": [{"to": i, "relation_type": "supplements", "evidence": "fake"}
                          for i in ids[:2]],
        }))  # fmt: skip

    fake = FakeOpenAI().start()
    try:
        fake.script("/v1/chat/completions", *[reply] * limit)
        chat = settings.replace(
            chat_base_url=fake.base_url, chat_model="fake-chat", chat_api_key="x", chat_timeout=30.0
        )
        with psycopg.connect(url) as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT id::text FROM kb.documents ORDER BY source_uri LIMIT %s", (limit,)
            ).fetchall()]  # fmt: skip
            conn.commit()
            stats = GraphStats()
            started = time.perf_counter()
            enrich_documents(conn, chat, ids, stats)
            seconds = time.perf_counter() - started
        print(f"| chat-model step, fake server (no model latency), {len(ids)} documents | "
              f"{seconds:.1f} s ({1000 * seconds / max(len(ids), 1):.0f} ms a document); "
              f"{stats.llm_documents} updated, {stats.llm_edges} edges, "
              f"{stats.llm_fallbacks} fallbacks |")  # fmt: skip
    finally:
        fake.stop()


if __name__ == "__main__":
    raise SystemExit(main())
