"""A LangChain retriever over pgkb (``pip install 'pgkb[langchain]'``).

    from loader.integrations.langchain import PgkbRetriever

    retriever = PgkbRetriever(collections=["hr"], limit=5)      # pgkb's configured database
    retriever = PgkbRetriever(serve_url="http://127.0.0.1:8000", token="...")  # pgkb serve
    docs = retriever.invoke("How many weeks of parental leave?")

Each ``Document`` is one chunk: ``page_content`` its text, ``metadata`` its title, ``source``
(the document's ``source_uri``), ``heading_path``, ``chunk_id``, ``document_id``,
``chunk_index``, ``score``, the legs' ranks and scores (``vector_rank``, ``vector_similarity``,
``keyword_rank``, ``keyword_score``), ``rerank_score``, ``category`` and the document's own
``document_metadata``. ``invoke`` and ``ainvoke`` (and batches) work: asynchronously, an HTTP
search is awaited, a database search runs on a worker thread.
"""

from __future__ import annotations

from typing import Any, Literal

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # pragma: no cover - what a user without the extra sees
    raise ImportError(
        "pgkb's LangChain retriever needs langchain-core: pip install 'pgkb[langchain]'"
    ) from exc
from pydantic import ConfigDict, Field, PrivateAttr

from loader.app import SearchOptions
from loader.integrations.backend import Backend, hit_metadata, make_backend, search_options


class PgkbRetriever(BaseRetriever):
    """pgkb's hybrid search as a LangChain retriever.

    Where it searches: ``serve_url`` (a running ``pgkb serve``, with ``token``), else
    ``database_url`` (the query embedded in this process with the knowledge base's model), else
    pgkb's configuration (``PGKB_DATABASE_URL``, ``pgkb.toml``, or the embedded server). The
    other fields are ``pgkb search``'s: ``mode``, ``limit``, ``category``, ``source`` (a LIKE
    pattern on source_uri), ``metadata`` (documents whose metadata contains it),
    ``collections``, ``min_similarity``, ``document_ids`` and ``rerank`` (None: when a reranker
    is configured).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    database_url: str | None = None
    serve_url: str | None = None
    token: str | None = Field(default=None, repr=False)
    settings: Any = Field(default=None, repr=False)
    """A :class:`loader.settings.Settings` to start from (default: pgkb's configuration)."""
    mode: Literal["hybrid", "vector", "keyword"] = "hybrid"
    k: int | None = None
    """How many documents to return, LangChain's name (1 to 50; wins over ``limit``; None: the
    ``match_count`` setting). ``invoke(query, k=3)`` asks for 3 in one call."""
    limit: int | None = None
    category: str | None = None
    source: str | None = None
    metadata_filter: dict[str, Any] | None = None
    collections: list[str] = Field(default_factory=list)
    min_similarity: float | None = None
    document_ids: list[str] = Field(default_factory=list)
    rerank: bool | None = None

    _backend: Backend | None = PrivateAttr(default=None)

    def _options(self, k: int | None = None) -> SearchOptions:
        return search_options(
            mode=self.mode,
            limit=k if k is not None else self.k if self.k is not None else self.limit,
            category=self.category,
            source=self.source,
            metadata=self.metadata_filter,
            collections=self.collections,
            min_similarity=self.min_similarity,
            document_ids=self.document_ids,
            rerank=self.rerank,
        )

    def _get_backend(self) -> Backend:
        if self._backend is None:
            self._backend = make_backend(
                database_url=self.database_url,
                serve_url=self.serve_url,
                token=self.token,
                settings=self.settings,
            )
        return self._backend

    @staticmethod
    def _documents(hits: list[dict[str, Any]]) -> list[Document]:
        return [Document(page_content=str(h["content"]), metadata=hit_metadata(h)) for h in hits]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._documents(self._get_backend().search(query, self._options(k)))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        return self._documents(await self._get_backend().asearch(query, self._options(k)))
