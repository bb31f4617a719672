"""Web pages as sources: ``pgkb ingest https://...``, ``--sitemap URL`` and a same-site crawl.

For each page, in order:

1. **robots.txt** of its site is read once (``web_user_agent``); a page it disallows is not
   fetched, and reported. A site whose robots.txt cannot be read for a server error or a
   network failure is not crawled (RFC 9309: assume complete disallow); a missing one (4xx)
   allows everything.
2. **Fetch**, following redirects, within ``web_timeout`` seconds and ``max_file_mb``; the
   validators stored with the page at its last ingest (``ETag``, ``Last-Modified``) are sent, so
   an unchanged page answers 304 and costs nothing more (a page whose links the crawl still
   follows is read whole, for its links; unchanged, it is skipped by its text's hash).
3. **Its identity** (``source_uri``) is the page's canonical URL (``<link rel="canonical">``,
   when it is on the same site), else the URL after redirects, without its fragment: the same
   page reached by two links is one document.
4. **Its main text**: trafilatura keeps the article and drops navigation, headers, footers and
   boilerplate; its Markdown (headings kept) goes through pgkb's own Markdown extraction, so
   chunks carry heading paths. PDF, Markdown and plain-text responses use pgkb's extractors.
5. **Crawl**: from each start URL, links on the same site (scheme and host) are followed up to
   ``--crawl-depth`` hops, breadth first, at most ``--max-pages`` pages in all.

Everything then goes through :func:`loader.ingest.pipeline.ingest_documents`: unchanged text is
skipped by its hash, a changed page is replaced in one transaction. A page that cannot be
fetched (a 404, a timeout, a refused connection, a disallowed URL) is reported with its URL and
the reason, and the run goes on; its stored version, if any, stays.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import dataclasses
import ipaddress
import itertools
import logging
import re
import socket
import threading
import time
import urllib.robotparser
import xml.etree.ElementTree as ElementTree
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

import psycopg

from loader.db import queries
from loader.db.session import connection
from loader.errors import ConfigError
from loader.filters import DEFAULT_COLLECTION
from loader.ingest.extract import ExtractionError, Section, extract
from loader.ingest.pipeline import ingest_documents
from loader.ingest.report import IngestReport, ProgressCallback
from loader.ingest.sources import SourceDocument
from loader.providers.embeddings import Embedder, get_embedder
from loader.settings import Settings
from loader.settings_checks import origin_list, origin_of

log = logging.getLogger(__name__)

MAX_REDIRECTS = 10
MAX_SITEMAPS = 50
"""Sitemaps read in one run (an index and the sitemaps it lists)."""
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = {"text/markdown": "page.md", "text/x-markdown": "page.md", "text/plain": "page.txt"}


def is_url(value: str) -> bool:
    """Whether a command-line argument names a web page rather than a path."""
    return value.lower().startswith(("http://", "https://"))


def check_url(url: str, *, where: str = "URL") -> str:
    """``url`` without its fragment, or a :class:`ConfigError` naming it and what is wrong."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError as exc:
        raise ConfigError(f"{where} {url!r} is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(
            f"{where} {url!r} is not an http(s) URL",
            hint="give a web page as https://host/path, or a file or folder path",
        )
    if not parts.hostname:
        raise ConfigError(f"{where} {url!r} has no host name", hint="e.g. https://example.org/")
    return urldefrag(urlunsplit(parts))[0]


def _site(url: str) -> str:
    """``url``'s origin (scheme, host, port), as :func:`origin_of` writes it."""
    try:
        return origin_of(url)
    except ConfigError:
        return ""


def _upgrade(source: str, target: str) -> bool:
    """``target`` is ``source``'s own host over https on the default port (an http site moving
    its visitors to https): followed like the same origin."""
    return source.startswith("http://") and target == "https://" + source[len("http://") :]


def address_is_public(address: str) -> bool:
    """Whether an IP address is a public one: not loopback, private, link-local, shared
    (100.64/10), reserved, multicast or unspecified (an IPv4 address mapped in IPv6 judged as
    the IPv4 one)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def private_target_refusal(start_public: bool, address: str, url: str) -> str | None:
    """Why ``url`` (connected at ``address``) is not fetched when reached by a redirect (or a
    later fetch of an origin seen public) from a public start, or None: a public site must not
    steer pgkb to the services of the machine or network it runs in."""
    if not start_public or address_is_public(address):
        return None
    return (
        f"redirected to {url}, at {address}: a loopback, private or link-local address "
        "reached from a public site, not fetched (give that URL itself to ingest it)"
    )


@dataclasses.dataclass
class Page:
    url: str
    """The URL asked for."""
    final_url: str
    status: int
    content_type: str
    body: bytes
    etag: str | None
    last_modified: str | None
    charset: str | None = None
    """The charset the Content-Type header named, if any."""
    truncated: bool = False
    """The body was cut at its cap (robots.txt only: what follows is ignored)."""


class FetchError(Exception):
    """A page that could not be fetched; the message names the URL and why."""


class _Refused(Exception):
    """Raised inside httpcore's trace hook: the connection is dropped before the request goes."""


PIECE = 64 * 1024
"""Bytes decoded at a time: a compressed body never inflates more than this at once."""


def _accept_encoding() -> str:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return "gzip, deflate"
    return "gzip, deflate, zstd"


def _inflate(raw: Iterable[bytes], wbits: int) -> Iterator[bytes]:
    """gzip / zlib / raw deflate, decoded :data:`PIECE` bytes at a time (concatenated gzip
    members too)."""
    decoder = zlib.decompressobj(wbits)
    for chunk in raw:
        data = chunk
        while data:
            piece = decoder.decompress(data, PIECE)
            if piece:
                yield piece
            data = decoder.unconsumed_tail
            if decoder.eof:
                data = decoder.unused_data + data
                if not data.strip(b"\0"):
                    break
                decoder = zlib.decompressobj(wbits)
            elif not data and len(piece) == PIECE:
                data = b""
                while True:  # output still held back by the piece limit
                    more = decoder.decompress(b"", PIECE)
                    if not more:
                        break
                    yield more
    tail = decoder.flush()
    if tail:
        yield tail


def _deflate(raw: Iterable[bytes]) -> Iterator[bytes]:
    """``Content-Encoding: deflate``: zlib-wrapped as the RFC says, or raw deflate as some
    servers send it."""
    chunks = iter(raw)
    first = next(chunks, b"")
    wbits = zlib.MAX_WBITS if first[:1] and (first[0] & 0x0F) == 8 else -zlib.MAX_WBITS
    return _inflate(itertools.chain([first], chunks), wbits)


class _RawReader:
    """A file-like view of an iterator of bytes (for zstandard's stream reader)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.buffer = chunks, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buffer += chunk
        if size < 0:
            out, self.buffer = self.buffer, b""
        else:
            out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out


def _unzstd(raw: Iterable[bytes]) -> Iterator[bytes]:
    import zstandard

    source: Any = _RawReader(iter(raw))  # read() is all the stream reader calls
    reader = zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True)
    while piece := reader.read(PIECE):
        yield piece


def decoded(raw: Iterable[bytes], content_encoding: str) -> Iterator[bytes]:
    """The body of ``Content-Encoding: content_encoding``, decoded a piece at a time (never more
    than :data:`PIECE` bytes inflated at once: the caller's size cap holds while it streams);
    :class:`FetchError` for a coding pgkb did not ask for."""
    pieces: Iterable[bytes] = raw
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    for coding in reversed(codings):
        if coding in ("identity", ""):
            continue
        if coding in ("gzip", "x-gzip"):
            pieces = _inflate(pieces, 16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            pieces = _deflate(pieces)
        elif coding == "zstd" and "zstd" in _accept_encoding():
            pieces = _unzstd(pieces)
        else:
            raise FetchError(
                f"Content-Encoding {coding!r} is not supported (pgkb asks for "
                f"{_accept_encoding()}): the server sent it unasked"
            )
    return iter(pieces)


class _Connections:
    """httpcore's trace hook for one fetch: the socket of each connection (cut at the deadline)
    and its peer address (checked against the private-address rule before the request goes)."""

    def __init__(self, fetcher: Fetcher, deadline: float) -> None:
        self.fetcher, self.deadline = fetcher, deadline
        self.lock = threading.Lock()
        self.socket: socket.socket | None = None
        self.expired = False
        self.check: Callable[[str], None] | None = None
        """Called with the peer address of each new connection; raises :class:`_Refused`."""
        self.timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
        self.timer.daemon = True
        self.timer.start()

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        with self.lock:
            self.socket = sock
            if self.expired:
                raise _Refused("deadline")
        if self.check is not None and sock is not None:
            try:
                self.check(sock.getpeername()[0])
            except _Refused:
                sock.close()  # never used: no request goes to that address
                raise

    def _expire(self) -> None:
        with self.lock:
            self.expired = True
            if self.socket is not None:
                with contextlib.suppress(OSError):
                    self.socket.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.timer.cancel()


class Fetcher:
    """HTTP for one run: one client, robots.txt read once per origin, the run's origins.

    Redirects are followed here, hop by hop, not by httpx: each target must be on an origin the
    user named (the start URLs', the sitemaps', ``--allow-origin``), be allowed by its own
    origin's robots.txt, and, when the start was a public address, not be a loopback, private
    or link-local one. Every body streams under a cap counted after decoding, and every fetch
    ends by ``web_deadline``.
    """

    def __init__(self, settings: Settings, origins: Iterable[str] = ()) -> None:
        import httpx

        self.settings = settings
        self.max_bytes = int(settings.max_file_mb * 1_000_000)
        self.client = httpx.Client(
            follow_redirects=False,
            timeout=httpx.Timeout(settings.web_timeout),
            headers={"User-Agent": settings.web_user_agent, "Accept-Encoding": _accept_encoding()},
            # a connection per request: each is seen by the deadline and the address rule
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self.origins: set[str] = set(origin_list(settings.web_allowed_origins))
        for url in origins:
            self.allow(url)
        self.public: dict[str, bool] = {}
        """Per origin: whether its first connection was to a public address."""
        self.robots: dict[str, urllib.robotparser.RobotFileParser | str] = {}
        self.notes: list[str] = []

    def allow(self, url: str) -> None:
        """Let the crawl go to ``url``'s origin (a start URL's, a sitemap's)."""
        origin = _site(url)
        if origin:
            self.origins.add(origin)

    def on_origin(self, url: str) -> bool:
        """Whether ``url`` is on an origin of this run (or the https of one's http)."""
        origin = _site(url)
        return origin in self.origins or any(_upgrade(o, origin) for o in self.origins)

    def close(self) -> None:
        self.client.close()

    def allowed(self, url: str) -> str | None:
        """None when robots.txt allows ``url``; else why not."""
        site = _site(url)
        if site not in self.robots:
            self.robots[site] = self._robots(site)
        rules = self.robots[site]
        if isinstance(rules, str):
            return rules
        if not rules.can_fetch(self.settings.web_user_agent, url):
            return f"disallowed by {site}/robots.txt"
        return None

    def _robots(self, site: str) -> urllib.robotparser.RobotFileParser | str:
        where = f"{site}/robots.txt"
        parser = urllib.robotparser.RobotFileParser(where)
        limit = int(self.settings.web_robots_max_kb * 1024)
        try:
            page = self.fetch(where, limit=limit, truncate=True, robots=False)
        except FetchError as exc:
            return f"{where} could not be read ({exc}), so the site is not crawled"
        if page.status >= 500:
            return f"{where} answered {page.status}, so the site is not crawled"
        if page.truncated:
            self.notes.append(
                f"{where} is larger than web_robots_max_kb ({limit // 1024} KiB): only its "
                "first part was read, as Google does (raise PGKB_WEB_ROBOTS_MAX_KB to read more)"
            )
        # a missing robots.txt (4xx) allows everything: no rules
        text = page_text(page) if page.status < 400 else ""
        lines = text.splitlines()
        if page.truncated and lines:
            lines.pop()  # the line the cap cut
        parser.parse(lines)
        return parser

    def _hop_refusal(self, source: str, target: str) -> str | None:
        """Why a redirect from ``source`` to ``target`` is not followed, or None."""
        if not self.on_origin(target) and not _upgrade(_site(source), _site(target)):
            return (
                f"redirected to {target}, on another origin ({_site(target)}): not followed "
                f"(allow it with --allow-origin {_site(target)})"
            )
        refused = self.allowed(target)
        return f"redirected to {target}: {refused}" if refused else None

    def fetch(
        self,
        url: str,
        validators: tuple[str | None, str | None] = (None, None),
        *,
        limit: int | None = None,
        truncate: bool = False,
        robots: bool = True,
        what: str = "page",
    ) -> Page:
        """GET ``url`` (with If-None-Match / If-Modified-Since from ``validators``), following
        redirects under the run's rules, its body capped at ``limit`` bytes once decoded
        (``max_file_mb``; with ``truncate``, what is past it is left unread instead); a
        :class:`FetchError` naming why for anything but a 2xx, a 304 (or, with ``robots`` off,
        the status of a robots.txt)."""
        import httpx

        headers = {}
        etag, modified = validators
        if etag:
            headers["If-None-Match"] = etag
        if modified:
            headers["If-Modified-Since"] = modified
        deadline = time.monotonic() + self.settings.web_deadline
        connections = _Connections(self, deadline)
        current, start_public = url, False
        try:
            for hop in range(MAX_REDIRECTS + 1):
                if hop:
                    refused = self._hop_refusal(url, current) if robots else None
                    if not robots and not self.on_origin(current):
                        refused = f"redirected to {current}, on another origin: not followed"
                    if refused:
                        raise FetchError(refused)

                def check(
                    address: str, hop: int = hop, at: str = current, origin: str = _site(current)
                ) -> None:
                    nonlocal start_public
                    public = address_is_public(address)
                    if hop == 0:
                        seen = self.public.setdefault(origin, public)
                        start_public = seen
                        refusal = private_target_refusal(seen, address, at)
                        if refusal:  # the name pointed elsewhere before: DNS rebinding
                            raise _Refused(refusal.replace("redirected to", "now at", 1))
                        return
                    refusal = private_target_refusal(start_public, address, at)
                    if refusal:
                        raise _Refused(refusal)

                connections.check = check
                request = self.client.build_request(
                    "GET", current, headers=headers, extensions={"trace": connections}
                )
                response = self.client.send(request, stream=True)
                try:
                    location = response.headers.get("location")
                    if response.is_redirect and location:
                        current = urldefrag(urljoin(current, location.strip()))[0]
                        continue
                    return self._page(response, url, limit, truncate, robots, deadline, what)
                finally:
                    response.close()
            raise FetchError(f"more than {MAX_REDIRECTS} redirects")
        except _Refused as exc:
            if connections.expired:
                raise FetchError(self._late()) from None
            raise FetchError(str(exc)) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            if connections.expired:
                raise FetchError(self._late()) from None
            raise FetchError(_why(exc, self.settings)) from None
        finally:
            connections.close()

    def _late(self) -> str:
        return (
            f"not complete within web_deadline ({self.settings.web_deadline:g} s in all): the "
            "server sends too slowly; raise PGKB_WEB_DEADLINE to wait longer"
        )

    def _page(
        self,
        response: Any,
        url: str,
        limit: int | None,
        truncate: bool,
        robots: bool,
        deadline: float,
        what: str,
    ) -> Page:
        status = response.status_code
        truncated = False
        if status == 304:
            body = b""
        elif status >= 400 and robots:
            reason = response.reason_phrase or ""
            raise FetchError(f"HTTP {status} {reason}".strip())
        elif status >= 400:
            body = b""
        else:
            body, truncated = self._read(
                response, self.max_bytes if limit is None else limit, truncate, deadline, what
            )
        kind, _, params = response.headers.get("content-type", "").partition(";")
        return Page(
            url=url,
            final_url=urldefrag(str(response.url))[0],
            status=status,
            content_type=kind.strip().lower(),
            body=body,
            etag=response.headers.get("etag"),
            last_modified=response.headers.get("last-modified"),
            charset=_charset_param(params),
            truncated=truncated,
        )

    def _read(
        self, response: Any, limit: int, truncate: bool, deadline: float, what: str
    ) -> tuple[bytes, bool]:
        """The body, decoded, at most ``limit`` bytes (raw and decoded), read by ``deadline``;
        ``(body, truncated)``."""
        encoding = response.headers.get("content-encoding", "")
        raw_size = 0

        def raw() -> Iterator[bytes]:
            nonlocal raw_size
            for chunk in response.iter_raw(PIECE):
                raw_size += len(chunk)
                if raw_size > limit and not truncate:
                    raise FetchError(self._too_large(limit, what, encoded=False))
                if time.monotonic() > deadline:
                    raise FetchError(self._late())
                yield chunk
                if raw_size > limit:  # truncating: this much is enough
                    return

        chunks, size = [], 0
        try:
            for piece in decoded(raw(), encoding):
                if time.monotonic() > deadline:
                    raise FetchError(self._late())
                if size + len(piece) > limit:
                    if truncate:
                        chunks.append(piece[: limit - size])
                        return b"".join(chunks), True
                    raise FetchError(self._too_large(limit, what, encoded=bool(encoding)))
                size += len(piece)
                chunks.append(piece)
        except (zlib.error, EOFError) as exc:
            raise FetchError(f"its {encoding} body cannot be decoded: {exc}") from None
        except Exception as exc:
            if type(exc).__name__ == "ZstdError":
                raise FetchError(f"its zstd body cannot be decoded: {exc}") from None
            raise
        return b"".join(chunks), False

    def _too_large(self, limit: int, what: str, *, encoded: bool) -> str:
        after = " once decompressed" if encoded else ""
        if what == "sitemap":
            return (
                f"sitemap larger than web_sitemap_max_mb ({limit / 1e6:g} MB){after}; split "
                "it, or raise PGKB_WEB_SITEMAP_MAX_MB to read it"
            )
        return (
            f"larger than max_file_mb ({limit / 1e6:g} MB){after}; raise PGKB_MAX_FILE_MB to "
            "ingest it"
        )


def _charset_param(params: str) -> str | None:
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip("\"'"):
            return value.strip().strip("\"'")
    return None


def _why(exc: Exception, settings: Settings) -> str:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {settings.web_timeout:g} s (web_timeout)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc}"
    return f"{type(exc).__name__}: {exc}"


# --- text encodings ---------------------------------------------------------------------------

_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE
)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""")
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))  # fmt: skip


def _codec(label: str | None) -> str | None:
    """Python's codec for a charset label, or None. ISO-8859-1 and ASCII are read as
    windows-1252, as browsers do (WHATWG Encoding): pages so labelled use its 0x80-0x9F."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip()).name
    except LookupError:
        return None
    return "cp1252" if name in ("latin-1", "iso8859-1", "ascii") else name


def _declared(body: bytes, html: bool) -> str | None:
    """The charset the document declares in its first 4 KiB (``<meta charset>``, ``<meta
    http-equiv content="...; charset=...">``, an XML declaration)."""
    head = body[:4096]
    found = _XML_ENCODING.search(head) or (_META_CHARSET.search(head) if html else None)
    return found.group(1).decode("ascii") if found else None


def decode_text(body: bytes, header_charset: str | None, *, html: bool) -> str:
    """A text body as text: a byte-order mark, else the Content-Type header's charset, else
    what the document declares, else UTF-8, else the charset detected (charset-normalizer),
    else UTF-8 with the bytes it cannot read replaced."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body.decode(codec, "replace")
    labels: tuple[str | None, ...] = (header_charset, _declared(body, html))
    for label in labels:
        named = _codec(label)
        if named is None:
            continue
        try:
            return body.decode(named)
        except (UnicodeDecodeError, LookupError):
            if named == "cp1252":  # the five bytes windows-1252 leaves undefined
                return body.decode("latin-1")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(body[:1_000_000]).best()
    if best is not None:
        with contextlib.suppress(UnicodeDecodeError, LookupError):
            return body.decode(best.encoding)
    return body.decode("utf-8", "replace")


def page_text(page: Page) -> str:
    return decode_text(page.body, page.charset, html=page.content_type in HTML_TYPES)


# --- pages to documents ----------------------------------------------------------------------


@dataclasses.dataclass
class Parsed:
    document: SourceDocument | None
    links: list[str]
    more_links: int = 0
    """Links of the page past ``web_max_links``, not read."""


def _tree(text: str) -> Any:
    """The page parsed once by lxml (None when it holds no element)."""
    import lxml.etree  # type: ignore[import-untyped]
    import lxml.html  # type: ignore[import-untyped]

    text = _XML_DECLARATION.sub("", text, count=1)  # lxml refuses one in a str
    try:
        return lxml.html.document_fromstring(text)
    except (ValueError, lxml.etree.ParserError):
        return None


_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


def canonical_url(tree: Any, final_url: str) -> str:
    """The page's ``<link rel="canonical">`` when it points to the same site, else its URL."""
    for link in tree.iter("link") if tree is not None else ():
        rels = str(link.get("rel") or "").lower().split()
        href = link.get("href")
        if "canonical" in rels and href:
            canonical = urldefrag(urljoin(final_url, str(href).strip()))[0]
            if _site(canonical) == _site(final_url):
                return canonical
    return final_url


def html_title(tree: Any) -> str | None:
    """The page's ``<title>``, on one line (None when it has none)."""
    tag = next(tree.iter("title"), None) if tree is not None else None
    title = " ".join(tag.text_content().split()) if tag is not None else ""
    return title or None


def page_links(tree: Any, base: str, limit: int) -> tuple[list[str], int]:
    """The first ``limit`` http(s) links of a page, absolute, without fragments, in order, once
    each, and how many more the page has (one pass over the parsed page)."""
    found: dict[str, None] = {}
    more = 0
    for anchor in tree.iter("a") if tree is not None else ():
        href = anchor.get("href")
        if href is None:
            continue
        href = str(href).strip()
        if not href or href.startswith(("mailto:", "javascript:", "tel:", "#")):
            continue
        if len(found) >= limit:
            more += 1
            continue
        try:
            url = check_url(urljoin(base, href))
        except (ValueError, ConfigError):  # a malformed link on the page: not followed
            continue
        found[url] = None
    return list(found), more


_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>])")


def _sections_from_markdown(markdown: str) -> tuple[str | None, list[Section]]:
    """Sections with heading paths from trafilatura's Markdown (its backslash escapes removed:
    ``\\[`` is ``[`` in the stored text)."""
    text = _MD_ESCAPE.sub(r"\1", markdown)
    extracted = extract(text.encode("utf-8"), "page.md", "text/markdown")
    return extracted.title, extracted.sections


def parse_page(page: Page, metadata: dict[str, Any], max_links: int = 5000) -> Parsed:
    """The page as a document (None when it holds no text) and its links (at most
    ``max_links``; ``Parsed.more_links`` says how many more it had)."""
    kind = page.content_type
    if kind in HTML_TYPES or (not kind and page.body.lstrip()[:1] == b"<"):
        return _parse_html(page, metadata, max_links)
    if kind == "application/pdf":
        extracted = extract(page.body, "page.pdf", "application/pdf")
    elif kind in TEXT_TYPES:
        name = TEXT_TYPES[kind]
        utf8 = decode_text(page.body, page.charset, html=False).encode("utf-8")
        extracted = extract(utf8, name, "text/markdown" if name.endswith(".md") else None)
    else:
        raise ExtractionError(f"unsupported content type {kind or '(none)'}")
    title = extracted.title or PurePosixPath(urlsplit(page.final_url).path).name or page.final_url
    text = "\n\n".join(s.text for s in extracted.sections)
    document = SourceDocument(
        page.final_url, title, text, extracted.sections, metadata={**metadata}
    )
    return Parsed(document, [])


def _parse_html(page: Page, metadata: dict[str, Any], max_links: int) -> Parsed:
    import trafilatura

    text = decode_text(page.body, page.charset, html=True)
    tree = _tree(text)
    uri = canonical_url(tree, page.final_url)
    links, more = page_links(tree, page.final_url, max_links)
    page_title = html_title(tree)
    markdown = trafilatura.extract(
        text,
        url=page.final_url,
        output_format="markdown",
        include_tables=True,
        include_comments=False,
        include_links=False,
        include_images=False,
        favor_recall=True,
        with_metadata=False,
    )
    if not page_title:
        meta = trafilatura.extract_metadata(text, default_url=page.final_url)
        page_title = (meta.title if meta is not None else None) or None
    if not markdown or not markdown.strip():
        return Parsed(None, links, more)
    md_title, sections = _sections_from_markdown(markdown)
    title = page_title or md_title or uri
    document = SourceDocument(
        uri,
        title,
        "\n\n".join(s.text for s in sections),
        sections,
        metadata={**metadata, **({"canonical_url": uri} if uri != page.final_url else {})},
    )
    return Parsed(document, links, more)


# --- sitemaps -----------------------------------------------------------------------------------


def sitemap_urls(fetcher: Fetcher, url: str, report: IngestReport) -> list[str]:
    """The page URLs of a sitemap (following a sitemap index, at most :data:`MAX_SITEMAPS`
    sitemaps); a sitemap that cannot be read is reported, and so is an entry on an origin the
    run was not given (not fetched)."""
    pages: dict[str, None] = {}
    queue = collections.deque([url])
    seen: set[str] = set()
    limit = int(fetcher.settings.web_sitemap_max_mb * 1_000_000)
    elsewhere: list[str] = []
    while queue and len(seen) < MAX_SITEMAPS:
        current = queue.popleft()
        if current in seen:
            continue
        seen.add(current)
        try:
            page = fetcher.fetch(current, limit=limit, what="sitemap")
            data = page.body
            if data[:2] == b"\x1f\x8b":  # a .xml.gz file: inflated a piece at a time, capped
                data = _gunzip(data, limit, fetcher)
            # expat (Python's XML parser) expands no external entity and bounds entity
            # amplification: a hostile sitemap cannot read files or blow up the memory
            root = ElementTree.fromstring(data)
        except FetchError as exc:
            report.fail(current, f"sitemap: {exc}")
            continue
        except (ElementTree.ParseError, OSError, ValueError) as exc:
            report.fail(current, f"sitemap is not valid XML: {exc}")
            continue
        kind = root.tag.rpartition("}")[2]
        for loc in root.findall(".//{*}loc"):
            target = (loc.text or "").strip()
            if not target:
                continue
            target = urldefrag(urljoin(current, target))[0]
            if not fetcher.on_origin(target):
                elsewhere.append(target)
            elif kind == "sitemapindex":
                queue.append(target)
            else:
                pages[target] = None
    if elsewhere:
        origins = sorted({_site(u) for u in elsewhere})
        report.fail(
            url,
            f"sitemap lists {len(elsewhere)} URL(s) on other origins ({', '.join(origins[:5])}"
            f"{', ...' if len(origins) > 5 else ''}), not fetched (e.g. {elsewhere[0]}); allow "
            "an origin with --allow-origin to fetch its pages",
        )
    return list(pages)


def _gunzip(data: bytes, limit: int, fetcher: Fetcher) -> bytes:
    out, size = [], 0
    try:
        for piece in _inflate([data], 16 + zlib.MAX_WBITS):
            size += len(piece)
            if size > limit:
                raise FetchError(fetcher._too_large(limit, "sitemap", encoded=True))
            out.append(piece)
    except zlib.error as exc:
        raise FetchError(f"its gzip data cannot be decoded: {exc}") from None
    return b"".join(out)


# --- the run ------------------------------------------------------------------------------------


def stored_validators(
    conn: psycopg.Connection[Any], collection: str
) -> dict[str, tuple[str | None, str | None, str | None]]:
    """Web pages of ``collection`` as stored: URL asked for -> (source_uri, ETag,
    Last-Modified)."""
    rows = conn.execute(queries.WEB_VALIDATORS, (collection,)).fetchall()
    conn.commit()
    return {str(url): (uri, etag, modified) for url, uri, etag, modified in rows}


@dataclasses.dataclass
class Crawl:
    """What to fetch: start pages (followed ``depth`` hops on their site) and sitemap pages."""

    start: list[str]
    sitemaps: list[str] = dataclasses.field(default_factory=list)
    depth: int = 0
    max_pages: int = 100
    origins: list[str] = dataclasses.field(default_factory=list)
    """More origins redirects, links and sitemap entries may lead to (``--allow-origin``)."""


def crawl_pages(
    fetcher: Fetcher,
    crawl: Crawl,
    stored: dict[str, tuple[str | None, str | None, str | None]],
    report: IngestReport,
    progress: ProgressCallback | None = None,
) -> Iterator[SourceDocument]:
    """Fetch and parse the pages, breadth first; unchanged ones (304) are counted, failures
    reported; yields the documents to ingest."""
    queue: collections.deque[tuple[str, int]] = collections.deque()
    for url in crawl.start:
        queue.append((url, 0))
    for sitemap in crawl.sitemaps:
        for url in sitemap_urls(fetcher, sitemap, report):
            queue.append((url, crawl.depth))  # listed pages are not followed further
    seen: set[str] = set()
    yielded: set[str] = set()
    fetched = 0
    while queue and fetched < crawl.max_pages:
        url, depth = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        refused = fetcher.allowed(url)
        if refused:
            report.fail(url, refused)
            continue
        fetched += 1
        report.files_seen += 1
        previous = stored.get(url)
        # a page whose links the crawl follows is read whole (an unchanged one is still skipped
        # by its hash); the others are asked with their validators, so unchanged is a 304
        follow = depth < crawl.depth
        validators = (previous[1], previous[2]) if previous and not follow else (None, None)
        try:
            with report.phase("fetch"):
                page = fetcher.fetch(url, validators)
        except FetchError as exc:
            report.fail(url, str(exc))
            continue
        if progress:
            progress("file", {"source": url, "status": str(page.status)})
        if page.final_url != url:  # a redirect to a page this run already has: nothing new
            if page.final_url in seen:
                continue
            seen.add(page.final_url)
        if page.status == 304:
            report.unchanged += 1
            continue
        metadata: dict[str, Any] = {
            "url": url,
            "final_url": page.final_url,
            "content_type": page.content_type,
            "size_bytes": len(page.body),
        }
        if page.etag:
            metadata["http_etag"] = page.etag
        if page.last_modified:
            metadata["http_last_modified"] = page.last_modified
        try:
            with report.phase("extract"):
                parsed = parse_page(page, metadata, fetcher.settings.web_max_links)
        except ExtractionError as exc:
            report.fail(url, exc.message)
            continue
        except Exception as exc:  # a parser bug on one odd page must not stop the run
            log.debug("unexpected error on %s", url, exc_info=True)
            report.fail(url, f"cannot extract: {type(exc).__name__}: {exc}")
            continue
        if follow and fetcher.on_origin(page.final_url):
            for link in parsed.links:
                if fetcher.on_origin(link) and link not in seen and _looks_like_page(link):
                    queue.append((link, depth + 1))
            if parsed.more_links:
                report.notes.append(
                    f"{url}: only its first {fetcher.settings.web_max_links} links were read "
                    f"for the crawl ({parsed.more_links} more not followed; web_max_links); "
                    "raise PGKB_WEB_MAX_LINKS to follow them"
                )
        if parsed.document is None:
            report.fail(url, "no main text found on the page")
            continue
        if parsed.document.source_uri in yielded:  # two URLs, one canonical page
            continue
        yielded.add(parsed.document.source_uri)
        yield parsed.document
    if queue and fetched >= crawl.max_pages:
        left = len({u for u, _ in queue} - seen)
        if left:
            report.notes.append(
                f"stopped at --max-pages {crawl.max_pages}: {left} more linked page(s) were not "
                "fetched; raise --max-pages to follow them"
            )


_NOT_PAGES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".css", ".js", ".zip", ".gz", ".tar",
              ".ico", ".woff", ".woff2", ".mp4", ".mp3", ".webp"}  # fmt: skip


def _looks_like_page(url: str) -> bool:
    return PurePosixPath(urlsplit(url).path).suffix.lower() not in _NOT_PAGES


def ingest_web(
    settings: Settings,
    crawl: Crawl,
    *,
    category: str | None = None,
    meta: dict[str, str] | None = None,
    collection: str = DEFAULT_COLLECTION,
    wait: bool = True,
    progress: ProgressCallback | None = None,
    embedder: Embedder | None = None,
) -> IngestReport:
    """Fetch and ingest the pages of ``crawl`` into ``collection`` (see the module's doc)."""
    started = time.perf_counter()
    embedder = embedder or get_embedder(settings)
    fetcher = Fetcher(settings, [*crawl.start, *crawl.sitemaps, *crawl.origins])
    report = IngestReport()
    try:
        with connection(settings) as conn:
            stored = stored_validators(conn, collection)
            # every page fetched first: the ingestion lock is not held while the network is slow
            documents = list(
                _with_meta(crawl_pages(fetcher, crawl, stored, report, progress), meta or {})
            )
            written = ingest_documents(
                conn,
                documents,
                embedder,
                settings,
                category=category,
                progress=progress,
                wait=wait,
                collection=collection,
            )
    finally:
        fetcher.close()
    report.notes.extend(fetcher.notes)
    report.merge(written)
    report.seconds["total"] = time.perf_counter() - started
    return report


def _with_meta(
    documents: Iterable[SourceDocument], meta: dict[str, str]
) -> Iterator[SourceDocument]:
    for document in documents:
        yield dataclasses.replace(document, metadata={**document.metadata, **meta})


def start_urls(values: Sequence[str]) -> list[str]:
    return [check_url(v) for v in values]
