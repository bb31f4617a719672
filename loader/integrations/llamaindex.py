"""A LlamaIndex retriever over pgkb (``pip install 'pgkb[llamaindex]'``).

    from loader.integrations.llamaindex import PgkbRetriever

    retriever = PgkbRetriever(collections=["hr"], limit=5)      # pgkb's configured database
    retriever = PgkbRetriever(serve_url="http://127.0.0.1:8000", token="...")  # pgkb serve
    nodes = retriever.retrieve("How many weeks of parental leave?")

Each ``NodeWithScore`` holds one chunk as a ``TextNode`` (its id ``pgkb-chunk-<chunk_id>``,
its text, its source document as the ``SOURCE`` relation) with the score pgkb ranked it by
(the reranker's when one ran, else the fused score); the node's metadata is the chunk's title,
``source``, ``heading_path``, ids, scores and the legs' ranks. Only the title, source and
heading path are shown to the LLM and the embedder. ``retrieve`` and ``aretrieve`` work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as exc:  # pragma: no cover - what a user without the extra sees
    raise ImportError(
        "pgkb's LlamaIndex retriever needs llama-index-core: pip install 'pgkb[llamaindex]'"
    ) from exc

from loader.app import SearchOptions
from loader.integrations.backend import Backend, hit_metadata, make_backend, search_options
from loader.settings import Settings

SHOWN_KEYS = ("title", "source", "heading_path")
"""Metadata the LLM and the embedder see with a node's text; the rest is for the program."""


class PgkbRetriever(BaseRetriever):
    """pgkb's hybrid search as a LlamaIndex retriever.

    Where it searches: ``serve_url`` (a running ``pgkb serve``, with ``token``), else
    ``database_url`` (the query embedded in this process with the knowledge base's model), else
    pgkb's configuration (``PGKB_DATABASE_URL``, ``pgkb.toml``, or the embedded server). The
    other arguments are ``pgkb search``'s: ``mode``, ``limit`` (or LlamaIndex's name for it,
    ``similarity_top_k``), ``category``, ``source`` (a LIKE
    pattern on source_uri), ``metadata`` (documents whose metadata contains it),
    ``collections``, ``min_similarity``, ``document_ids`` and ``rerank`` (None: when a reranker
    is configured).
    """

    def __init__(
        self,
        *,
        database_url: str | None = None,
        serve_url: str | None = None,
        token: str | None = None,
        settings: Settings | None = None,
        mode: str = "hybrid",
        limit: int | None = None,
        similarity_top_k: int | None = None,
        category: str | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        collections: Sequence[str] = (),
        min_similarity: float | None = None,
        document_ids: Sequence[str] = (),
        rerank: bool | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.options: SearchOptions = search_options(
            mode=mode,
            limit=similarity_top_k if similarity_top_k is not None else limit,
            category=category,
            source=source,
            metadata=metadata,
            collections=collections,
            min_similarity=min_similarity,
            document_ids=document_ids,
            rerank=rerank,
        )
        self.backend: Backend = make_backend(
            database_url=database_url, serve_url=serve_url, token=token, settings=settings
        )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @staticmethod
    def _nodes(hits: list[dict[str, Any]]) -> list[NodeWithScore]:
        nodes = []
        for hit in hits:
            metadata = hit_metadata(hit)
            node = TextNode(
                id_=f"pgkb-chunk-{hit['chunk_id']}",
                text=str(hit["content"]),
                metadata=metadata,
                excluded_llm_metadata_keys=[k for k in metadata if k not in SHOWN_KEYS],
                excluded_embed_metadata_keys=[k for k in metadata if k not in SHOWN_KEYS],
                relationships={
                    NodeRelationship.SOURCE: RelatedNodeInfo(node_id=str(hit["document_id"]))
                },
            )
            score = hit.get("rerank_score")
            nodes.append(
                NodeWithScore(node=node, score=score if score is not None else hit["score"])
            )
        return nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self.backend.search(query_bundle.query_str, self.options))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self.backend.asearch(query_bundle.query_str, self.options))
