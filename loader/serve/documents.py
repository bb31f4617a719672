"""``/v1/documents`` on ``pgkb serve``: documents written by services, through the write queue.

``POST /v1/documents``
    Add or replace a document: JSON ``{"source_uri", "content", "title", "metadata",
    "category", "collection"}`` (``content`` Markdown or plain text), or a
    ``multipart/form-data`` upload with the same fields as form fields and the file as ``file``
    (its type from its part's ``Content-Type``, else from its name; ``source_uri`` defaults to
    the file's name; ``metadata`` a JSON object as text). Answers 202 with the job
    (``kb.document_jobs``' row: ``id``, ``state`` pending, ...); a worker (``pgkb worker`` or
    ``pgkb serve --worker``) then processes it. The same document posted again is the same job.
``GET /v1/documents``
    The jobs the server's role may read, newest first (``?state=pending|processing|ready|failed``,
    ``?limit=``): ``{"documents": [...]}``.
``GET /v1/documents/{id}``
    One job: its state, error, title, document id and chunks once ready.
``PUT /v1/documents/{id}``
    Replace that job's document (the same ``source_uri`` and collection) with new content or a
    new file, as a whole (title, metadata and category are the PUT's); 202 with the new job.
``DELETE /v1/documents/{id}``
    Remove that job's document; 202 with the removal's job.

Writing (``POST``, ``PUT``, ``DELETE``) needs the server's writing token (``serve_write_token``,
``--write-token``) as the bearer token: the read token gets 403, and a server started without one
answers every write with 403 saying how to enable it. The write itself goes through
:meth:`loader.app.core.KnowledgeBase.submit` / ``remove`` as the server's database role, so the
database's per-collection writing grants decide (another collection: 403). Reading the jobs needs
only the read token.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath
from typing import Any

import anyio
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loader.app import (
    BadRequest,
    Forbidden,
    JobsRequest,
    JobState,
    RemoveRequest,
    SubmitRequest,
    surrogate_path,
)
from loader.serve.guard import MULTIPART_TYPE, bearer_matches
from loader.serve.service import KnowledgeService

FIELDS = ("source_uri", "content", "title", "metadata", "category", "collection")
"""What a POST may carry (a PUT: the same but ``source_uri`` and ``collection``, the job's)."""
MAX_FORM_FIELDS = 20


def document_routes(
    service: KnowledgeService,
    *,
    write_token: str | None,
    json_body: Callable[[Request], Awaitable[dict[str, object]]],
    handler: Callable[[Callable[[Request], Any]], Callable[[Request], Any]],
) -> list[Route]:
    """The routes of ``/v1/documents`` over ``service``; ``json_body`` reads a JSON object body
    and ``handler`` turns the core's refusals into JSON errors (both :mod:`loader.serve.http`'s)."""

    async def run(fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn)

    def check_writer(request: Request) -> None:
        if not write_token:
            raise Forbidden(
                "this server does not write documents",
                hint="start pgkb serve with --write-token (PGKB_SERVE_WRITE_TOKEN) and send that "
                "token as the bearer token to write",
            )
        if not bearer_matches(request.headers.get("authorization", ""), write_token):
            raise Forbidden(
                "writing documents needs the server's writing token; this token may only read",
                hint="send the writing token (serve_write_token) as the bearer token",
            )

    async def fields(request: Request, allowed: tuple[str, ...]) -> dict[str, Any]:
        """The request's fields, from JSON or a multipart upload (the file as ``data`` and
        ``mime_type``)."""
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != MULTIPART_TYPE:
            body = await json_body(request)
            extra = sorted(set(body) - set(allowed))
            if extra:
                raise BadRequest(
                    f"unknown field(s): {', '.join(extra)}; accepted: {', '.join(allowed)}",
                    hint="a file goes as a multipart/form-data upload (the field file)"
                    if "url" not in extra
                    else "fetching a URL is not supported: fetch it and send its content",
                )
            return {k: _typed(k, v) for k, v in body.items()}
        form = await _form(request)
        try:
            return await _form_fields(form, allowed)
        finally:
            await form.close()

    async def post(request: Request) -> Response:
        check_writer(request)
        given = await fields(request, FIELDS)
        submitted = _submit_request(given)
        job = await run(lambda: service.submit(submitted))
        return _job(job, 202)

    async def listed(request: Request) -> Response:
        params = request.query_params
        unknown = sorted(set(params) - {"state", "limit"})
        if unknown:
            raise BadRequest(f"unknown parameter(s): {', '.join(unknown)}; accepted: state, limit")
        limit = params.get("limit")
        if limit is not None and not limit.isdigit():
            raise BadRequest(f"limit must be a whole number, got {limit!r}")
        asked = JobsRequest(
            state=params.get("state") or None, limit=100 if limit is None else int(limit)
        )
        jobs = await run(lambda: service.jobs(asked))
        return JSONResponse({"documents": [job.to_dict() for job in jobs]})

    async def one(request: Request) -> Response:
        return _job(await run(lambda: _find(request)), 200)

    def _find(request: Request) -> JobState:
        (job,) = service.jobs(JobsRequest(job_id=str(request.path_params["id"])))
        return job

    async def put(request: Request) -> Response:
        check_writer(request)
        given = await fields(request, tuple(f for f in FIELDS if f not in ("collection",)))
        old = await run(lambda: _find(request))
        if given.get("source_uri") not in (None, old.source_uri):
            raise BadRequest(
                f"job {old.id} is the document {old.source_uri!r}; PUT replaces that document",
                hint="leave source_uri out, or POST /v1/documents for another document",
            )
        submitted = _submit_request(
            {**given, "source_uri": old.source_uri, "collection": old.collection}
        )
        return _job(await run(lambda: service.submit(submitted)), 202)

    async def delete(request: Request) -> Response:
        check_writer(request)
        old = await run(lambda: _find(request))
        removal = RemoveRequest(old.source_uri, collection=old.collection)
        return _job(await run(lambda: service.remove(removal)), 202)

    return [
        Route("/v1/documents", handler(post), methods=["POST"]),
        Route("/v1/documents", handler(listed), methods=["GET"]),
        Route("/v1/documents/{id}", handler(one), methods=["GET"]),
        Route("/v1/documents/{id}", handler(put), methods=["PUT"]),
        Route("/v1/documents/{id}", handler(delete), methods=["DELETE"]),
    ]


def _job(job: JobState, status: int) -> JSONResponse:
    return JSONResponse(job.to_dict(), status_code=status)


def _typed(name: str, value: Any) -> Any:
    """A JSON field of the right type: ``metadata`` an object, the others text."""
    if value is None:
        return None
    if name == "metadata":
        if not isinstance(value, dict):
            raise BadRequest('metadata must be a JSON object, e.g. {"team": "hr"}')
        return value
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string, got {json.dumps(value)[:60]}")
    return value


def _submit_request(given: dict[str, Any]) -> SubmitRequest:
    if given.get("source_uri") is None:
        raise BadRequest("source_uri is required: the document's name, e.g. notes/travel.md")
    if given.get("content") is None and given.get("data") is None:
        raise BadRequest("give the document's text as content, or upload a file as file")
    return SubmitRequest(
        source_uri=given["source_uri"],
        content=given.get("content"),
        data=given.get("data"),
        mime_type=given.get("mime_type"),
        title=given.get("title"),
        metadata=given.get("metadata") or {},
        category=given.get("category"),
        collection=given.get("collection") or "default",
    )


async def _form(request: Request) -> FormData:
    try:
        return await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    except HTTPException as exc:  # starlette's: a malformed body, too many files or fields
        raise BadRequest(f"the multipart body cannot be read: {exc.detail}") from None


async def _form_fields(form: FormData, allowed: tuple[str, ...]) -> dict[str, Any]:
    extra = sorted(set(form.keys()) - {*allowed, "file"})
    if extra:
        raise BadRequest(
            f"unknown form field(s): {', '.join(extra)}; accepted: {', '.join(allowed)}, file"
        )
    given: dict[str, Any] = {}
    for name in allowed:
        value = form.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise BadRequest(f"{name} must be a form field, not a file")
        if name == "metadata":
            try:
                parsed = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise BadRequest(f"metadata is not valid JSON: {exc}") from None
            if surrogate_path(parsed) is not None:
                raise BadRequest("metadata holds a lone surrogate, which is not Unicode text")
            given[name] = _typed(name, parsed)
        else:
            given[name] = value
    upload = form.get("file")
    if upload is not None:
        if not isinstance(upload, UploadFile):
            raise BadRequest("file must be a file part (a filename in its Content-Disposition)")
        if given.get("content") is not None:
            raise BadRequest("give the document's text (content) or a file, not both")
        given["data"] = await upload.read()
        given["mime_type"] = _mime_type(upload)
        if given.get("source_uri") is None and upload.filename:
            given["source_uri"] = PurePosixPath(upload.filename.replace("\\", "/")).name
    return given


def _mime_type(upload: UploadFile) -> str:
    """The part's own type, unless it is the generic one; then the name's."""
    declared = (upload.content_type or "").split(";", 1)[0].strip().lower()
    if declared and declared != "application/octet-stream":
        return declared
    guessed = mimetypes.guess_type(upload.filename or "")[0]
    if guessed is None and (upload.filename or "").lower().endswith((".md", ".markdown")):
        guessed = "text/markdown"
    return guessed or declared or "application/octet-stream"
