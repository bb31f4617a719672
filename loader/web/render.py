"""How the web interface's responses are made: the templates' environment and its filters,
:func:`url`, the security headers every response carries (:func:`secure`, :class:`Static` for
the stylesheet and the script), cookies, the error page for errors no page handled, and an
answer's text with its citations as links (:func:`answer_pieces`)."""

from __future__ import annotations

import functools
import re
import urllib.parse
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from loader.web import reads

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


TITLES = {
    404: "Not found",
    405: "Not allowed",
    408: "Too slow",
    413: "Too large",
    415: "Not a form or JSON",
    421: "Wrong address",
    429: "Too many at once",
    500: "Internal error",
    503: "Busy",
}


def error_page(status: int, message: str, hint: str = "") -> Response:
    """An error as a page of the web interface (the server's own words, never a traceback),
    for the errors no page handled: an unknown address, a method, an unexpected failure."""
    html = shared_environment().get_template("error.html").render(
        request_path="", signed_in=False, signout_csrf="", scope="", section="",
        title=TITLES.get(status, "Error"), message=message, hint=hint,
    )  # fmt: skip
    return secure(HTMLResponse(html, status_code=status))


@functools.cache
def shared_environment() -> Any:
    return environment()


def environment() -> Any:
    """The templates' Jinja environment: autoescaping everywhere, strict undefined names, the
    filters and globals the templates use."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = reads.age
    env.filters["thousands"] = lambda n: "" if n is None else f"{int(n):,}"
    env.filters["type_label"] = lambda t: str(t or "").replace("_", " ")
    env.filters["paragraphs"] = paragraphs
    env.filters["plural"] = lambda n, word: f"{n:,} {word}{'' if n == 1 else 's'}"
    env.filters["bytes"] = human_bytes
    env.globals["url"] = url
    env.globals["type_colour"] = lambda t: TYPE_CLASS.get(t, "general")
    return env


TYPE_CLASS = {t: t for t in reads.DOC_TYPES}


def url(path: str, params: dict[str, Any] | None = None, fragment: str = "") -> str:
    """``path`` with ``params`` as its query string (None and "" left out)."""
    items: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        if value is None or value == "":
            continue
        if isinstance(value, list | tuple):
            items.extend((key, str(v)) for v in value if v not in (None, ""))
        else:
            items.append((key, str(value)))
    query = urllib.parse.urlencode(items)
    return path + ("?" + query if query else "") + ("#" + fragment if fragment else "")


def paragraphs(text: str) -> list[str]:
    parts = [p.strip() for p in re.split(r"\n\s*\n", text or "")]
    return [p for p in parts if p]


def human_bytes(n: Any) -> str:
    value = float(n or 0)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


def set_cookie(request: Request, response: Response, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def secure(response: Response) -> Response:
    """The security headers every response of the web interface carries."""
    for key, value in SECURITY_HEADERS.items():
        response.headers.setdefault(key, value)
    if response.media_type and response.media_type.startswith("text/html"):
        response.headers.setdefault("Cache-Control", "no-store")
    return response


class Static:
    """The static files with the security headers and a day's caching."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                for key, value in SECURITY_HEADERS.items():
                    headers.append((key.lower().encode(), value.encode()))
                headers.append((b"cache-control", b"public, max-age=3600"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def answer_pieces(answer: Any) -> list[tuple[str, str | None]]:
    """The answer's text as ``(text, href)`` pieces: each ``[Title]`` of a cited passage becomes
    a link to that passage in its document (href None: plain text)."""
    text = str(answer.answer or "")
    targets: dict[str, str] = {}
    for passage in answer.citations:
        targets.setdefault(
            passage.title.strip().lower(),
            url(f"/documents/{passage.document_id}", {"chunk": passage.chunk_index},
                f"chunk-{passage.chunk_index}"),
        )  # fmt: skip
    pieces: list[tuple[str, str | None]] = []
    at = 0
    for match in re.finditer(r"\[([^\[\]\n]{1,300})\]", text):
        href = targets.get(match.group(1).strip().lower())
        if href is None:
            continue
        if match.start() > at:
            pieces.append((text[at : match.start()], None))
        pieces.append((match.group(0), href))
        at = match.end()
    if at < len(text):
        pieces.append((text[at:], None))
    return pieces
