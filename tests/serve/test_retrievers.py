"""The LangChain and LlamaIndex retrievers, with the real frameworks, against the database (as a
``--read`` role, the query embedded in this process) and against a running ``pgkb serve``:
the same chunks as ``pgkb search``, with title, source, heading path, ids, scores and the legs'
ranks as metadata; the filters, collections, modes and the reranker of ``pgkb search``; sync
and async; clear errors for a wrong server or a bad option.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loader.errors import ConfigError, PgkbError
from tests.fake_openai import FakeOpenAI
from tests.serve_fixtures import ServeKb, running, serve_kb  # noqa: F401  (fixture)

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]

TOKEN = "retriever-token"
FURNITURE = "Who covers the cost of furniture for my home workspace?"
INDEX = "How do I build an index without locking writes?"


@pytest.fixture(scope="module")
def server(serve_kb: ServeKb) -> Iterator[str]:  # noqa: F811
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(serve_kb.as_reader(), pool_size=2).open()
    with running(create_app(service, token=TOKEN)) as url:
        yield url


def _search_ids(kb: ServeKb, query: str, **kwargs: Any) -> list[int]:
    from loader.db.session import connection
    from loader.providers.embeddings import get_embedder
    from loader.search import search

    settings = kb.as_reader()
    mode = kwargs.pop("mode", "hybrid")
    vector = None if mode == "keyword" else get_embedder(settings).embed_query(query)
    with connection(settings, read=True) as conn:
        hits = search(conn, query, vector, settings=settings, mode=mode, **kwargs)
    return [h.chunk_id for h in hits]


@pytest.mark.parametrize("where", ["database", "serve"])
def test_langchain_retriever(where: str, serve_kb: ServeKb, server: str) -> None:  # noqa: F811
    from langchain_core.documents import Document

    from loader.integrations.langchain import PgkbRetriever

    place = (
        {"database_url": serve_kb.reader_url}
        if where == "database"
        else {"serve_url": server, "token": TOKEN}
    )
    retriever = PgkbRetriever(**place, limit=3, settings=serve_kb.as_reader())
    docs = retriever.invoke(FURNITURE)
    assert all(isinstance(d, Document) for d in docs) and len(docs) == 3
    top = docs[0]
    assert top.metadata["source"].endswith("equipment.md")
    assert top.metadata["title"] == "Home office equipment budget"
    assert top.metadata["heading_path"].startswith("Home office equipment budget")
    assert "600 EUR" in top.page_content
    assert top.metadata["vector_rank"] is not None and top.metadata["keyword_rank"] is not None
    assert top.metadata["score"] > 0 and top.metadata["chunk_id"] > 0
    assert [d.metadata["chunk_id"] for d in docs] == _search_ids(serve_kb, FURNITURE, limit=3)

    # async, a filter, a mode, a source pattern
    adocs = asyncio.run(
        PgkbRetriever(**place, category="engineering", mode="keyword", limit=5).ainvoke(INDEX)
    )
    assert adocs and all(d.metadata["category"] == "engineering" for d in adocs)
    assert all(d.metadata["vector_rank"] is None for d in adocs)
    only = PgkbRetriever(**place, source="%vacuum.md").invoke(INDEX)
    assert only and {d.metadata["source"] for d in only} == {"engineering/vacuum.md"}
    batch = PgkbRetriever(**place, limit=1).batch([FURNITURE, INDEX])
    assert [b[0].metadata["source"] for b in batch] == [
        "handbook/equipment.md",
        "engineering/createindex.md",
    ]
    # a collection nobody has: nothing, not an error (the database keeps to its grants)
    assert PgkbRetriever(**place, collections=["default"]).invoke(INDEX)


@pytest.mark.parametrize("where", ["database", "serve"])
def test_llamaindex_retriever(where: str, serve_kb: ServeKb, server: str) -> None:  # noqa: F811
    from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore

    from loader.integrations.llamaindex import PgkbRetriever

    place = (
        {"database_url": serve_kb.reader_url}
        if where == "database"
        else {"serve_url": server + "/v1", "token": TOKEN}
    )
    retriever = PgkbRetriever(**place, limit=4, settings=serve_kb.as_reader())
    nodes = retriever.retrieve(INDEX)
    assert all(isinstance(n, NodeWithScore) for n in nodes) and len(nodes) == 4
    top = nodes[0]
    assert top.node.metadata["source"].endswith("createindex.md")
    assert top.node.node_id == f"pgkb-chunk-{top.node.metadata['chunk_id']}"
    assert top.score == top.node.metadata["score"]
    assert (
        top.node.relationships[NodeRelationship.SOURCE].node_id
        == (top.node.metadata["document_id"])
    )
    llm_text = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "title: CREATE INDEX" in llm_text and "vector_rank" not in llm_text
    assert [n.node.metadata["chunk_id"] for n in nodes] == _search_ids(serve_kb, INDEX, limit=4)
    anodes = asyncio.run(PgkbRetriever(**place, mode="vector", limit=2).aretrieve(FURNITURE))
    assert len(anodes) == 2 and anodes[0].node.metadata["keyword_rank"] is None
    scoped = PgkbRetriever(**place, metadata={"file_name": "leave.md"}).retrieve(FURNITURE)
    assert {n.node.metadata["source"] for n in scoped} == {"handbook/leave.md"}


def test_the_reranker_orders_what_the_retriever_returns(serve_kb: ServeKb) -> None:  # noqa: F811
    from loader.integrations.langchain import PgkbRetriever

    fake = FakeOpenAI().start()
    try:
        settings = dataclasses.replace(
            serve_kb.as_reader(),
            rerank_provider="api",
            rerank_model="fake-rerank",
            rerank_base_url=fake.base_url,
        )
        docs = PgkbRetriever(settings=settings, limit=2, rerank=True).invoke(FURNITURE)
        plain = PgkbRetriever(settings=settings, limit=2, rerank=False).invoke(FURNITURE)
    finally:
        fake.stop()
    assert len(fake.requests_to("/v1/rerank")) == 1
    assert all(d.metadata["rerank_score"] is not None for d in docs)
    assert all(d.metadata["rerank_score"] is None for d in plain)


def test_clear_errors(server: str, serve_kb: ServeKb) -> None:  # noqa: F811
    from loader.integrations.langchain import PgkbRetriever
    from loader.integrations.llamaindex import PgkbRetriever as IndexRetriever

    with pytest.raises(PgkbError, match="answered 401") as refused:
        PgkbRetriever(serve_url=server).invoke("x")
    assert "token" in (refused.value.hint or "")
    with pytest.raises(PgkbError, match=r"cannot reach pgkb serve at http://127\.0\.0\.1:9"):
        PgkbRetriever(serve_url="http://127.0.0.1:9").invoke("x")
    with pytest.raises(ConfigError, match="not an http"):
        PgkbRetriever(serve_url="127.0.0.1:8000").invoke("x")
    with pytest.raises(ConfigError, match="not both"):
        IndexRetriever(serve_url=server, database_url=serve_kb.reader_url)
    with pytest.raises(ConfigError, match="limit"):
        IndexRetriever(serve_url=server, limit=0)
    with pytest.raises(ConfigError, match="collection name"):
        IndexRetriever(serve_url=server, collections=["no spaces"])
    with pytest.raises(ConfigError, match="empty"):
        PgkbRetriever(serve_url=server, token=TOKEN).invoke("  ")


def test_the_guide_examples_run_as_written(serve_kb: ServeKb, tmp_path: Path) -> None:  # noqa: F811
    """The two examples of docs/guides/frameworks.md, run as they are written, with pgkb's
    configuration (PGKB_DATABASE_URL) pointing at the knowledge base."""
    guide = (ROOT / "docs" / "guides" / "frameworks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.DOTALL)
    assert len(blocks) == 2
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "XDG_CONFIG_HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        **serve_kb.env(serve_kb.reader_url),
    }
    for block in blocks:
        result = subprocess.run(
            [sys.executable, "-c", block],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith("CREATE INDEX engineering/createindex.md"), result.stdout
        assert "VACUUM" in result.stdout


def test_the_frameworks_conventions_for_how_many(serve_kb: ServeKb) -> None:  # noqa: F811
    """LangChain's ``k`` (in the constructor and per call: ``invoke(query, k=1)``, what
    langchain-tests' RetrieversIntegrationTests checks) and LlamaIndex's ``similarity_top_k``."""
    from loader.integrations.langchain import PgkbRetriever
    from loader.integrations.llamaindex import PgkbRetriever as LlamaRetriever

    place = {"database_url": serve_kb.reader_url, "settings": serve_kb.as_reader()}
    assert len(PgkbRetriever(**place, k=3).invoke(FURNITURE)) == 3
    assert len(PgkbRetriever(**place, k=1).invoke(FURNITURE)) == 1
    retriever = PgkbRetriever(**place)
    assert len(retriever.invoke(FURNITURE, k=1)) == 1
    assert len(retriever.invoke(FURNITURE, k=3)) == 3
    assert len(asyncio.run(retriever.ainvoke(FURNITURE, k=2))) == 2
    assert len(LlamaRetriever(**place, similarity_top_k=2).retrieve(FURNITURE)) == 2
    with pytest.raises(ConfigError, match="limit must be from 1 to 50"):
        retriever.invoke(FURNITURE, k=500)
