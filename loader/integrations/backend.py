"""Where the framework retrievers get their chunks: the database itself (the query embedded
in this process with pgkb's embedder, then :func:`loader.search.search`), or a running
``pgkb serve`` (``POST /v1/search``). Both take the options of ``pgkb search`` and return the
same hits (``SearchHit.to_dict()``), so a retriever does not care which one it talks to.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from loader.app import BadRequest, KnowledgeBase, SearchOptions, SearchRequest
from loader.errors import ConfigError, PgkbError
from loader.settings import Settings, load_settings


class RetrieverError(PgkbError):
    """The retriever could not search: the server refused, or could not be reached."""


def search_options(**fields: Any) -> SearchOptions:
    """The retriever's fields as :class:`~loader.app.SearchOptions` (``pgkb search``'s options),
    or a :class:`ConfigError` naming the bad one and what it takes."""
    try:
        return SearchOptions.of(**fields)
    except BadRequest as exc:
        raise ConfigError(exc.message, hint=exc.hint) from None


class Backend(Protocol):
    def search(self, query: str, options: SearchOptions) -> list[dict[str, Any]]: ...

    async def asearch(self, query: str, options: SearchOptions) -> list[dict[str, Any]]: ...


class DatabaseBackend:
    """Search the database directly through the application core
    (:class:`loader.app.KnowledgeBase`): the query embedded here with the knowledge base's
    model (loaded once, on the first search), one read-only connection per search (to
    ``read_database_url`` when it is set)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._kb: KnowledgeBase | None = None
        self._lock = threading.Lock()

    def _knowledge_base(self) -> KnowledgeBase:
        with self._lock:
            if self._kb is None:
                self._kb = KnowledgeBase(self.settings)
            return self._kb

    def search(self, query: str, options: SearchOptions) -> list[dict[str, Any]]:
        request = SearchRequest(_query(query), options)
        return [hit.to_dict() for hit in self._knowledge_base().search(request).hits]

    async def asearch(self, query: str, options: SearchOptions) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.search, query, options)


class HttpBackend:
    """Search through a running ``pgkb serve`` (``POST {url}/v1/search``, with the bearer
    ``token`` when one is given): no model and no database driver in this process."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"serve_url {url!r} is not an http(s) URL",
                hint="give the address pgkb serve listens on, e.g. http://127.0.0.1:8000",
            )
        self.url = url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.token = token
        self.timeout = timeout

    def _request(self, query: str, options: SearchOptions) -> dict[str, Any]:
        """``POST /v1/search``'s body: the query and every option that is set."""
        body: dict[str, Any] = {"query": _query(query), "mode": options.mode}
        for name in ("limit", "category", "min_similarity", "rerank"):
            value = getattr(options, name)
            if value is not None:
                body[name] = value
        filters = options.filters
        if filters.source is not None:
            body["source"] = filters.source
        if filters.metadata:
            body["metadata"] = dict(filters.metadata)
        if filters.collections:
            body["collections"] = list(filters.collections)
        if options.document_ids:
            body["document_ids"] = list(options.document_ids)
        return body

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _results(self, response: Any) -> list[dict[str, Any]]:
        where = f"{self.url}/v1/search"
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code != 200:
            message = (
                data.get("error", {}).get("message")
                if isinstance(data, dict) and isinstance(data.get("error"), dict)
                else response.text[:200]
            )
            hint = {
                401: "pass the server's token (token=..., PGKB_SERVE_TOKEN on the server)",
                404: "is this the address of pgkb serve?",
            }.get(response.status_code)
            raise RetrieverError(f"{where} answered {response.status_code}: {message}", hint=hint)
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise RetrieverError(f"{where} did not answer with search results")
        return list(data["results"])

    def _unreachable(self, exc: Exception) -> RetrieverError:
        return RetrieverError(
            f"cannot reach pgkb serve at {self.url}: {type(exc).__name__}: {exc}",
            hint="start it with `pgkb serve`, or check serve_url",
        )

    def search(self, query: str, options: SearchOptions) -> list[dict[str, Any]]:
        import httpx

        try:
            response = httpx.post(
                f"{self.url}/v1/search",
                json=self._request(query, options),
                headers=self._headers(),
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        return self._results(response)

    async def asearch(self, query: str, options: SearchOptions) -> list[dict[str, Any]]:
        import httpx

        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.post(
                    f"{self.url}/v1/search",
                    json=self._request(query, options),
                    headers=self._headers(),
                )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        return self._results(response)


def _query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ConfigError("the query is empty: give the retriever some text to search for")
    return query.strip()


def make_backend(
    *,
    database_url: str | None,
    serve_url: str | None,
    token: str | None,
    settings: Settings | None,
) -> Backend:
    """The backend the arguments ask for: ``serve_url`` (HTTP), else the database
    (``database_url``, else ``settings``' or pgkb's configuration: PGKB_DATABASE_URL, or the
    embedded server)."""
    if serve_url and database_url:
        raise ConfigError("give database_url or serve_url, not both")
    if serve_url:
        return HttpBackend(serve_url, token)
    base = settings or load_settings()
    if database_url:
        base = base.replace(database_url=database_url)
    return DatabaseBackend(base)


def hit_metadata(hit: Mapping[str, Any]) -> dict[str, Any]:
    """What a framework document carries of a hit besides its text: title, source (its
    ``source_uri``), heading path, ids, scores and the legs' ranks, and the document's own
    metadata under ``document_metadata``."""
    return {
        "title": hit.get("title"),
        "source": hit.get("source_uri"),
        "heading_path": hit.get("heading_path"),
        "chunk_id": hit.get("chunk_id"),
        "document_id": str(hit.get("document_id")),
        "chunk_index": hit.get("chunk_index"),
        "score": hit.get("score"),
        "vector_rank": hit.get("vector_rank"),
        "vector_similarity": hit.get("vector_similarity"),
        "keyword_rank": hit.get("keyword_rank"),
        "keyword_score": hit.get("keyword_score"),
        "rerank_score": hit.get("rerank_score"),
        "category": hit.get("category"),
        "document_metadata": dict(hit.get("metadata") or {}),
    }
