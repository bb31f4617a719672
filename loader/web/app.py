"""The web interface's routes, mounted by :func:`loader.serve.http.create_app` beside the JSON
API.

==================  ============================================================================
``GET /``           the documents: filters (collection, category, type, words of the title),
                    sort (title, updated), pages of 50; stale documents and ingestion state marked
``GET /documents/ID``  one document: metadata, outline (each entry opens its chunk range), the
                    text of a chunk range within a token budget, relations in and out by type
``GET /graph``      the graph around a document (``?doc=ID&depth=1-3``) or the catalogue, as SVG
``GET /search``     search with the filters of ``pgkb search``; why each hit ranked
``GET /ask``        a cited answer or "I don't know"; ``/ask/stream`` streams it (server-sent
                    events) for the page's script
``GET /status``     counts, collections, models, the last ingestion runs, ``pgkb doctor``'s checks
``/signin``, ``/signout``  with a serve token: the token once, then a session cookie
``/static/...``     the stylesheet and the script
==================  ============================================================================

Every page runs its database work on a worker thread through the service's pool (read-only
connections in the served scope), renders a template with autoescaping, and goes out with a
Content-Security-Policy that allows scripts, styles and connections from this server only and
no inline script. A page's address is checked by :mod:`loader.web.params`, its response made by
:mod:`loader.web.render`; the status page's doctor checks are kept by
:mod:`loader.app.health`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import queue
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from loader.app import AskRequest, KnowledgeBase, SearchRequest
from loader.app.health import DoctorRuns
from loader.errors import DatabaseError, PgkbError
from loader.graph.catalogue import DocumentNotFound, show_document
from loader.web import auth, reads
from loader.web.graph_svg import layout
from loader.web.params import (
    PageError,
    ask_form,
    parse_uuid,
    query_choice,
    query_int,
    query_text,
    safe_next,
    search_form,
)
from loader.web.render import (
    STATIC,
    Static,
    answer_pieces,
    environment,
    error_page,
    secure,
    set_cookie,
    url,
)

__all__ = [  # moved to loader.web.render and loader.web.params: importable here as before
    "FORM_PATHS",
    "WebUI",
    "answer_pieces",
    "error_page",
    "is_web_path",
    "safe_next",
    "secure",
    "url",
    "wants_page",
    "web_routes",
]

log = logging.getLogger(__name__)

PAGE_PREFIXES = ("/documents/", "/static/")
PAGE_PATHS = frozenset(
    {"/", "/documents", "/graph", "/search", "/ask", "/ask/stream", "/status", "/signin",
     "/signout", "/favicon.ico"}
)  # fmt: skip
FORM_PATHS = frozenset({"/signin", "/signout"})
"""The pages whose POST carries a form (``application/x-www-form-urlencoded``), not JSON: they
check the form's CSRF value and the request's origin themselves."""


def is_web_path(path: str) -> bool:
    """Whether ``path`` is the web interface's (signed in with a session cookie), not the JSON
    API's (a bearer token)."""
    return path in PAGE_PATHS or path.startswith(PAGE_PREFIXES)


def wants_page(path: str, accept: str) -> bool:
    """Whether an error for ``path`` goes out as an HTML page: the web interface's paths, and
    any other but the JSON API's (``/v1/``, ``/healthz``) that a browser asks for."""
    if is_web_path(path):
        return True
    return "text/html" in accept and not path.startswith(("/v1/", "/healthz"))


class Step:
    """``with Step(request, "sql"): ...`` adds the block's time to the page's Server-Timing."""

    def __init__(self, request: Request, name: str) -> None:
        self.request, self.name, self.began = request, name, 0.0

    def __enter__(self) -> None:
        self.began = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        steps = getattr(self.request.state, "steps", None)
        if steps is not None:
            steps.append((self.name, (time.perf_counter() - self.began) * 1000))


class PageGone(Exception):
    """The page that asked went away: raised into the chat model's stream to stop the answer."""


class WebUI:
    """The pages of one server: its service, its sign-in rules, its templates."""

    def __init__(
        self, service: KnowledgeBase, *, token: str | None, stale_days: int | None = None
    ) -> None:
        self.service = service
        self.sessions = auth.Sessions(token) if token else None
        self.stale_days = service.settings.stale_days if stale_days is None else stale_days
        self.env = environment()
        self.doctor = DoctorRuns(service.settings)

    # -- plumbing ----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        page = self._page
        return [
            Route("/", page(self.documents), methods=["GET"]),
            Route("/documents", page(self.documents_redirect), methods=["GET"]),
            Route("/documents/{document_id}", page(self.document), methods=["GET"]),
            Route("/graph", page(self.graph), methods=["GET"]),
            Route("/search", page(self.search), methods=["GET"]),
            Route("/ask", page(self.ask), methods=["GET"]),
            Route("/ask/stream", self._guarded(self.ask_stream), methods=["GET"]),
            Route("/status", page(self.status), methods=["GET"]),
            Route("/signin", self._secured(self.signin_form), methods=["GET"]),
            Route("/signin", self._secured(self.signin), methods=["POST"]),
            Route("/signout", self._secured(self.signout), methods=["POST"]),
            Route("/favicon.ico", self._secured(self.favicon), methods=["GET"]),
            Mount("/static", app=Static(StaticFiles(directory=str(STATIC))), name="static"),
        ]

    def signed_in(self, request: Request) -> bool:
        return self.sessions is None or self.sessions.valid(
            request.cookies.get(auth.SESSION_COOKIE)
        )

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session = request.cookies.get(auth.SESSION_COOKIE)
        base = {
            "request_path": request.url.path,
            "signed_in": self.sessions is not None and self.signed_in(request),
            "signout_csrf": self.sessions.csrf_for(session)
            if self.sessions is not None and session and self.sessions.valid(session)
            else "",
            "scope": self._scope_label(),
            "section": context.pop("section", ""),
        }
        html = self.env.get_template(name).render(**base, **context)
        return secure(HTMLResponse(html, status_code=status))

    def _scope_label(self) -> str:
        parts = []
        names = self.service.settings.collection_names()
        if names:
            parts.append("collection" + ("s " if len(names) > 1 else " ") + ", ".join(names))
        if self.service.category:
            parts.append(f"category {self.service.category}")
        return "; ".join(parts)

    def _error(self, request: Request, exc: PageError) -> Response:
        return self.render(
            request,
            "error.html",
            status=exc.status,
            title=exc.title,
            message=exc.message,
            hint=exc.hint,
        )

    def _secured(
        self, fn: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return secure(await fn(request))
            except PageError as exc:
                return self._error(request, exc)

        return endpoint

    def _guarded(
        self, fn: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """Signed in (or no token set), else 401 / to the sign-in form."""

        async def endpoint(request: Request) -> Response:
            if not self.signed_in(request):
                if request.url.path == "/ask/stream":
                    return secure(Response("sign in first", status_code=401))
                target = request.url.path + ("?" + request.url.query if request.url.query else "")
                return secure(RedirectResponse(url("/signin", {"next": target}), 303))
            refused = self._cross_site_refusal(request)
            if refused is not None:
                return refused
            return await fn(request)

        return endpoint

    def _cross_site_refusal(self, request: Request) -> Response | None:
        """A 403 page for an address that costs or acts (:data:`auth.COSTLY`) requested from
        another site (a link followed, an image, a script's fetch), else None. The page links
        to the same address: followed from here, it runs."""
        what = auth.costly(request.url.path, request.query_params)
        if what is None or not auth.cross_site(request.headers, request.headers.get("host", "")):
            return None
        if request.url.path == "/ask/stream":
            return secure(Response("refused: requested from another site", status_code=403))
        here = request.url.path + "?" + request.url.query
        question = request.query_params.get("q", "")
        return self.render(
            request,
            "error.html",
            status=403,
            title="Opened from another site",
            message=f"A page of another site asked this server for {here[:300]}, which "
            f"{what}; it was not run.",
            hint=f"Your question: {question[:500]}" if question else "",
            go=here,
            go_label="Run it here" if not question else "Ask it here",
        )

    def _page(self, fn: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        """A page: signed in, its work on a worker thread, errors as error pages."""

        async def run(request: Request) -> Response:
            try:
                began = time.perf_counter()
                request.state.steps = []
                result = await anyio.to_thread.run_sync(lambda: fn(request))
                if isinstance(result, Response):
                    return secure(result)
                name, context = result
                read = time.perf_counter()
                response = self.render(request, name, **context)
                done = time.perf_counter()
                # how long the page took on the server (the benchmark reads it): the steps the
                # page marked within its read, then read, render and total
                steps = [f"{step};dur={ms:.1f}" for step, ms in request.state.steps]
                response.headers["Server-Timing"] = ", ".join(
                    [*steps, f"read;dur={(read - began) * 1000:.1f}",
                     f"render;dur={(done - read) * 1000:.1f}",
                     f"total;dur={(done - began) * 1000:.1f}"]
                )  # fmt: skip
                return response
            except PageError as exc:
                return self._error(request, exc)
            except DocumentNotFound as exc:
                return self._error(request, PageError(404, "No such document", exc.message))
            except DatabaseError as exc:  # the database is down or refused (the service's 503)
                return self._error(
                    request,
                    PageError(503, "The database is unavailable", exc.message, exc.hint or ""),
                )
            except PgkbError as exc:  # an argument the user can fix (the service's 400)
                return self._error(
                    request, PageError(400, "Cannot do that", exc.message, exc.hint or "")
                )

        return self._guarded(run)

    # -- the documents ------------------------------------------------------------------------

    def documents_redirect(self, request: Request) -> Response:
        return RedirectResponse(url("/", dict(request.query_params)), 308)

    def documents(self, request: Request) -> tuple[str, dict[str, Any]]:
        query = reads.ListQuery(
            collection=query_text(request, "collection", 200),
            category=query_text(request, "category", 200),
            doc_type=query_choice(request, "type", reads.DOC_TYPES, None),
            words=query_text(request, "q", 500),
            sort=query_choice(request, "sort", ("title", "updated"), "title"),
            page=query_int(request, "page", 1, 1_000_000, 1) or 1,
        )
        if query.category and self.service.category and query.category != self.service.category:
            raise PageError(
                400, "Not served", f"this server serves category {self.service.category} only"
            )
        with self.service.connection() as conn:
            page = reads.document_page(
                conn, query, category_scope=self.service.category, stale_days=self.stale_days
            )
            runs = reads.ingest_activity(conn, 10)
        failures = reads.open_failures(runs)
        return "documents.html", {
            "section": "documents",
            "query": query,
            "page": page,
            "running": [r for r in runs if r.running],
            "failures": failures,
            "stale_days": self.stale_days,
            "doc_types": reads.DOC_TYPES,
        }

    def document(self, request: Request) -> tuple[str, dict[str, Any]]:
        document_id = parse_uuid(request.path_params["document_id"])
        start = query_int(request, "start", 0, 10_000_000, None)
        end = query_int(request, "end", 0, 10_000_000, None)
        chunk = query_int(request, "chunk", 0, 10_000_000, None)
        if start is not None and end is not None and end < start:
            raise PageError(400, "Bad address", f"end ({end}) is before start ({start})")
        if chunk is not None and start is None:
            start = max(0, chunk - 1)
        with self.service.connection() as conn:
            row = reads.document_row(conn, document_id, stale_days=self.stale_days)
            if row is None or not self._in_category(row.category):
                raise DocumentNotFound(
                    f"no document {document_id} here",
                    hint="it was removed, or it is outside what this server may show",
                )
            detail = show_document(conn, document_id)
            reading = reads.read_range(conn, document_id, start, end)
        return "document.html", {
            "section": "documents",
            "doc": row,
            "detail": detail,
            "reading": reading,
            "hit": chunk,
            "groups": reads.relation_groups(detail),
            "budget": reads.READ_BUDGET,
        }

    def _in_category(self, category: str | None) -> bool:
        return self.service.category is None or category == self.service.category

    # -- the graph ------------------------------------------------------------------------------

    def graph(self, request: Request) -> tuple[str, dict[str, Any]]:
        doc = query_text(request, "doc", 100)
        start = parse_uuid(doc) if doc else None
        depth = query_int(request, "depth", 1, 3, 1) or 1
        types = request.query_params.getlist("type")
        bad = [t for t in types if t not in reads.RELATION_TYPES]
        if bad:
            raise PageError(
                400, "Bad address",
                f"unknown relation type {bad[0]!r}; one of {', '.join(reads.RELATION_TYPES)}",
            )  # fmt: skip
        filters = {"category": self.service.category} if self.service.category else {}
        with self.service.connection() as conn, Step(request, "sql"):
            data = reads.graph_nodes(
                conn, start=start, depth=depth, relation_types=types or None, filters=filters
            )
            if start is not None and not data.nodes:
                raise DocumentNotFound(
                    f"no document {start} here",
                    hint="it was removed, or it is outside what this server may show",
                )
            total = None
            if start is None:
                total = reads.document_total(conn, filters)
        with Step(request, "layout"):
            picture = layout(data.nodes, start)
        start_node = next((n for n in data.nodes if n.document_id == start), None)
        return "graph.html", {
            "section": "graph",
            "picture": picture,
            "data": data,
            "start_node": start_node,
            "depth": depth,
            "types": types,
            "relation_types": reads.RELATION_TYPES,
            "cap": reads.GRAPH_CAP,
            "total": total,
        }

    # -- search and ask -------------------------------------------------------------------------

    def _facets(self) -> dict[str, list[reads.Facet]]:
        with self.service.connection() as conn:
            return reads.document_facets(conn, category_scope=self.service.category)

    def search(self, request: Request) -> tuple[str, dict[str, Any]]:
        form = search_form(request)
        facets = self._facets()
        hits: list[dict[str, Any]] = []
        marks: list[list[tuple[str, bool]]] = []
        doc_title = None
        if form["doc"]:
            with self.service.connection() as conn:
                row = reads.document_row(conn, form["doc"], stale_days=0)
            doc_title = row.title if row else None
        if form["q"]:
            with Step(request, "search"):
                result = self.service.search(
                    SearchRequest.of(
                        form["q"],
                        mode=form["mode"],
                        limit=form["limit"],
                        category=form["category"],
                        source=form["source"],
                        metadata=form["metadata"],
                        min_similarity=form["min_similarity"],
                        document_ids=[form["doc"]] if form["doc"] else None,
                        collections=[form["collection"]] if form["collection"] else None,
                    )
                )
            hits = [hit.to_dict() for hit in result.hits]
            with self.service.connection() as conn, Step(request, "snippets"):
                marks = reads.headlines(conn, form["q"], [h["content"] for h in hits])
        return "search.html", {
            "section": "search",
            "form": form,
            "hits": list(zip(hits, marks, strict=True)) if hits else [],
            "facets": facets,
            "doc_title": doc_title,
        }

    def _answer(self, form: dict[str, Any], on_text: Callable[[str], None] | None) -> Any:
        category = form["category"]
        if category is not None and not self._in_category(category):
            raise PageError(
                400, "Not served", f"this server serves category {self.service.category} only"
            )
        asked = AskRequest.of(
            form["q"],
            category=category,
            collections=[form["collection"]] if form["collection"] else None,
        )
        return self.service.ask(asked, on_text=on_text)

    def ask(self, request: Request) -> tuple[str, dict[str, Any]]:
        form = ask_form(request)
        answer = self._answer(form, None) if form["q"] else None
        return "ask.html", {
            "section": "ask",
            "form": form,
            "answer": answer,
            "pieces": answer_pieces(answer) if answer else [],
            "facets": self._facets(),
            "streams": self.service.chat is not None,
        }

    async def ask_stream(self, request: Request) -> Response:
        """Server-sent events: ``text`` for each piece the chat model writes, then ``done`` with
        the checked answer's HTML (or ``failed`` with a message)."""
        try:
            form = ask_form(request)
        except PageError as exc:
            return secure(Response(exc.message, status_code=400))
        if not form["q"]:
            return secure(Response("the question is empty", status_code=400))
        pieces: queue.Queue[tuple[str, str] | None] = queue.Queue()
        gone = threading.Event()  # the client went away: stop the answer at its next piece

        def on_text(text: str) -> None:
            if gone.is_set():
                raise PageGone()
            pieces.put(("text", text))

        def work() -> None:
            try:
                answer = self._answer(form, on_text)
                html = self.env.get_template("_answer.html").render(
                    answer=answer, pieces=answer_pieces(answer)
                )
                pieces.put(("done", html))
            except PageGone:
                log.debug("the web interface's answer stopped: its client went away")
            except PgkbError as exc:
                pieces.put(("failed", exc.message + (f" ({exc.hint})" if exc.hint else "")))
            except Exception:
                log.exception("the web interface's answer failed")
                pieces.put(("failed", "internal error; the server log has the details"))
            finally:
                pieces.put(None)

        async def events() -> AsyncIterator[bytes]:
            thread = threading.Thread(target=work, name="pgkb-web-ask", daemon=True)
            thread.start()
            try:
                yield b": answering\n\n"
                while True:
                    item = await anyio.to_thread.run_sync(pieces.get)
                    if item is None:
                        break
                    kind, data = item
                    yield f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
            finally:  # ended, or cancelled because the client disconnected
                gone.set()

        response = StreamingResponse(events(), media_type="text/event-stream")
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Accel-Buffering"] = "no"
        return secure(response)

    # -- status -----------------------------------------------------------------------------------

    def warm(self) -> None:
        """Run the doctor's checks in the background once, so the first status page has them."""
        self.doctor.warm()

    def status(self, request: Request) -> tuple[str, dict[str, Any]]:
        recheck = request.query_params.get("recheck") == "1"
        filters = {"category": self.service.category} if self.service.category else {}
        settings = self.service.settings
        served = settings.collection_names()
        with self.service.connection() as conn:
            stats = reads.kb_stats(conn, filters)
            collections = reads.collections(conn)
            runs = reads.ingest_activity(conn, 10)
        if served:  # a role that reads more (the owner) serving some: the others are not shown
            collections = [c for c in collections if c["name"] in served]
        if self.service.category is not None:
            # a server of one category shows that category's counts and no run's paths or
            # failures: they name the files of every category
            counts = {c["collection"]: c for c in stats.get("collections") or []}
            collections = [
                {**c, "documents": counts[c["name"]]["documents"],
                 "chunks": counts[c["name"]]["chunks"]}
                for c in collections
                if c["name"] in counts
            ]  # fmt: skip
            runs = [dataclasses.replace(r, paths=[], failures=[]) for r in runs]
        doctor = self.doctor.checks(recheck)
        return "status.html", {
            "section": "status",
            "stats": stats,
            "collections": collections,
            "runs": runs,
            "doctor": doctor,
            "doctor_age": reads.age(None if doctor is None else _utc(doctor.at)),
            "model": self.service.model_name,
            "dims": self.service.embedder.dims,
            "chat_model": settings.chat_model if self.service.chat is not None else None,
            "revision": self.service.schema_revision,
            "served": served,
            "category": self.service.category,
        }

    # -- signing in ------------------------------------------------------------------------------

    async def signin_form(self, request: Request, message: str = "", status: int = 200) -> Response:
        target = safe_next(request.query_params.get("next"))
        if self.sessions is None or self.signed_in(request):
            return RedirectResponse(target, 303)
        value = request.cookies.get(auth.CSRF_COOKIE) or auth.new_csrf_value()
        response = self.render(
            request, "signin.html", status=status, csrf=value, next=target, message=message
        )
        set_cookie(request, response, auth.CSRF_COOKIE, value, auth.CSRF_SECONDS)
        return response

    async def signin(self, request: Request) -> Response:
        if self.sessions is None:
            return RedirectResponse("/", 303)
        if auth.cross_site(request.headers, request.headers.get("host", "")):
            raise PageError(403, "Refused", "a sign-in from another site is refused")
        form = await request.form()
        token = str(form.get("token") or "")
        csrf = str(form.get("csrf") or "")
        target = safe_next(str(form.get("next") or "/"))
        if not auth.same_values(request.cookies.get(auth.CSRF_COOKIE), csrf):
            raise PageError(
                403, "Refused", "the sign-in form has expired or did not come from this server",
                "open the sign-in page again",
            )  # fmt: skip
        if not self.sessions.token_matches(token):
            await anyio.sleep(0.5)  # slows down guessing
            request.scope["query_string"] = urllib.parse.urlencode({"next": target}).encode()
            return await self.signin_form(request, "That is not this server's token.", status=401)
        response = RedirectResponse(target, 303)
        set_cookie(request, response, auth.SESSION_COOKIE, self.sessions.issue(),
                self.sessions.lifetime)  # fmt: skip
        response.delete_cookie(auth.CSRF_COOKIE, path="/")
        return response

    async def signout(self, request: Request) -> Response:
        if self.sessions is None:
            return RedirectResponse("/", 303)
        if auth.cross_site(request.headers, request.headers.get("host", "")):
            raise PageError(403, "Refused", "a sign-out from another site is refused")
        form = await request.form()
        session = request.cookies.get(auth.SESSION_COOKIE)
        if not self.sessions.csrf_matches(session, str(form.get("csrf") or "")):
            raise PageError(403, "Refused", "the sign-out form did not come from this page")
        self.sessions.revoke(session)  # the cookie's copies open nothing any more
        response = RedirectResponse("/signin", 303)
        response.delete_cookie(auth.SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def favicon(self, request: Request) -> Response:
        return Response((STATIC / "favicon.svg").read_bytes(), media_type="image/svg+xml")


def _utc(timestamp: float) -> Any:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC)


def web_routes(service: KnowledgeBase, *, token: str | None, warm: bool = True) -> list[BaseRoute]:
    """The web interface's routes for :func:`loader.serve.http.create_app`."""
    ui = WebUI(service, token=token)
    if warm:
        ui.warm()
    return ui.routes()
