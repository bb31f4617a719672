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

import collections
import dataclasses
import gzip
import logging
import re
import time
import urllib.robotparser
import warnings
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator, Sequence
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


def _site(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower() + (
        f":{parts.port}" if parts.port else ""
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


class FetchError(Exception):
    """A page that could not be fetched; the message names the URL and why."""


class Fetcher:
    """HTTP for one run: one client, robots.txt read once per site."""

    def __init__(self, settings: Settings) -> None:
        import httpx

        self.settings = settings
        self.max_bytes = int(settings.max_file_mb * 1_000_000)
        self.client = httpx.Client(
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            timeout=httpx.Timeout(settings.web_timeout),
            headers={"User-Agent": settings.web_user_agent},
        )
        self.robots: dict[tuple[str, str], urllib.robotparser.RobotFileParser | str] = {}

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
            return f"disallowed by {site[0]}://{site[1]}/robots.txt"
        return None

    def _robots(self, site: tuple[str, str]) -> urllib.robotparser.RobotFileParser | str:
        import httpx

        where = f"{site[0]}://{site[1]}/robots.txt"
        parser = urllib.robotparser.RobotFileParser(where)
        try:
            response = self.client.get(where)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            why = _why(exc, self.settings)
            return f"{where} could not be read ({why}), so the site is not crawled"
        if response.status_code >= 500:
            return f"{where} answered {response.status_code}, so the site is not crawled"
        # a missing robots.txt (4xx) allows everything: no rules
        parser.parse([] if response.status_code >= 400 else response.text.splitlines())
        return parser

    def fetch(self, url: str, validators: tuple[str | None, str | None] = (None, None)) -> Page:
        """GET ``url`` (with If-None-Match / If-Modified-Since from ``validators``); a
        :class:`FetchError` naming the URL for anything but a 2xx or a 304."""
        import httpx

        headers = {}
        etag, modified = validators
        if etag:
            headers["If-None-Match"] = etag
        if modified:
            headers["If-Modified-Since"] = modified
        try:
            with self.client.stream("GET", url, headers=headers) as response:
                status = response.status_code
                if status == 304:
                    body = b""
                elif status >= 400:
                    reason = response.reason_phrase or ""
                    raise FetchError(f"HTTP {status} {reason}".strip())
                else:
                    body = self._read(response)
                final = str(response.url)
                content_type = response.headers.get("content-type", "").split(";")[0].strip()
                return Page(
                    url=url,
                    final_url=urldefrag(final)[0],
                    status=status,
                    content_type=content_type.lower(),
                    body=body,
                    etag=response.headers.get("etag"),
                    last_modified=response.headers.get("last-modified"),
                )
        except httpx.TooManyRedirects:
            raise FetchError(f"more than {MAX_REDIRECTS} redirects") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise FetchError(_why(exc, self.settings)) from None

    def _read(self, response: Any) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(
                    f"larger than max_file_mb ({self.max_bytes / 1e6:g} MB); raise "
                    "PGKB_MAX_FILE_MB to ingest it"
                )
            chunks.append(chunk)
        return b"".join(chunks)


def _why(exc: Exception, settings: Settings) -> str:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {settings.web_timeout:g} s (web_timeout)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc}"
    return f"{type(exc).__name__}: {exc}"


# --- pages to documents ----------------------------------------------------------------------


@dataclasses.dataclass
class Parsed:
    document: SourceDocument | None
    links: list[str]


def _soup(html: bytes) -> Any:
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        return BeautifulSoup(html, "lxml")


def canonical_url(html: bytes, final_url: str) -> str:
    """The page's ``<link rel="canonical">`` when it points to the same site, else its URL."""
    for link in _soup(html).find_all("link", href=True):
        rel = link.get("rel") or []
        rels = rel if isinstance(rel, list) else str(rel).split()
        if "canonical" in [r.lower() for r in rels]:
            canonical = urldefrag(urljoin(final_url, str(link["href"]).strip()))[0]
            if _site(canonical) == _site(final_url):
                return canonical
    return final_url


def html_title(html: bytes) -> str | None:
    """The page's ``<title>``, on one line (None when it has none)."""
    tag = _soup(html).find("title")
    title = " ".join(tag.get_text().split()) if tag is not None else ""
    return title or None


def page_links(html: bytes, base: str) -> list[str]:
    """The http(s) links of a page, absolute, without fragments, in order, once each."""
    found: dict[str, None] = {}
    for anchor in _soup(html).find_all("a", href=True):
        href = str(anchor["href"]).strip()
        if not href or href.startswith(("mailto:", "javascript:", "tel:", "#")):
            continue
        try:
            url = check_url(urljoin(base, href))
        except (ValueError, ConfigError):  # a malformed link on the page: not followed
            continue
        found[url] = None
    return list(found)


_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>])")


def _sections_from_markdown(markdown: str) -> tuple[str | None, list[Section]]:
    """Sections with heading paths from trafilatura's Markdown (its backslash escapes removed:
    ``\\[`` is ``[`` in the stored text)."""
    text = _MD_ESCAPE.sub(r"\1", markdown)
    extracted = extract(text.encode("utf-8"), "page.md", "text/markdown")
    return extracted.title, extracted.sections


def parse_page(page: Page, metadata: dict[str, Any]) -> Parsed:
    """The page as a document (None when it holds no text) and its links."""
    kind = page.content_type
    if kind in HTML_TYPES or (not kind and page.body.lstrip()[:1] == b"<"):
        return _parse_html(page, metadata)
    if kind == "application/pdf":
        extracted = extract(page.body, "page.pdf", "application/pdf")
    elif kind in TEXT_TYPES:
        name = TEXT_TYPES[kind]
        extracted = extract(page.body, name, "text/markdown" if name.endswith(".md") else None)
    else:
        raise ExtractionError(f"unsupported content type {kind or '(none)'}")
    title = extracted.title or PurePosixPath(urlsplit(page.final_url).path).name or page.final_url
    text = "\n\n".join(s.text for s in extracted.sections)
    document = SourceDocument(
        page.final_url, title, text, extracted.sections, metadata={**metadata}
    )
    return Parsed(document, [])


def _parse_html(page: Page, metadata: dict[str, Any]) -> Parsed:
    import trafilatura

    html = page.body
    uri = canonical_url(html, page.final_url)
    links = page_links(html, page.final_url)
    text = html.decode("utf-8", "replace")
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
    page_title = html_title(html)
    if not page_title:
        meta = trafilatura.extract_metadata(text, default_url=page.final_url)
        page_title = (meta.title if meta is not None else None) or None
    if not markdown or not markdown.strip():
        return Parsed(None, links)
    md_title, sections = _sections_from_markdown(markdown)
    title = page_title or md_title or uri
    document = SourceDocument(
        uri,
        title,
        "\n\n".join(s.text for s in sections),
        sections,
        metadata={**metadata, **({"canonical_url": uri} if uri != page.final_url else {})},
    )
    return Parsed(document, links)


# --- sitemaps -----------------------------------------------------------------------------------


def sitemap_urls(fetcher: Fetcher, url: str, report: IngestReport) -> list[str]:
    """The page URLs of a sitemap (following a sitemap index, at most :data:`MAX_SITEMAPS`
    sitemaps); a sitemap that cannot be read is reported."""
    pages: dict[str, None] = {}
    queue = collections.deque([url])
    seen: set[str] = set()
    while queue and len(seen) < MAX_SITEMAPS:
        current = queue.popleft()
        if current in seen:
            continue
        seen.add(current)
        try:
            page = fetcher.fetch(current)
            data = page.body
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
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
            if kind == "sitemapindex":
                queue.append(urljoin(current, target))
            else:
                pages[urldefrag(urljoin(current, target))[0]] = None
    return list(pages)


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
    sites = {_site(u) for u in crawl.start}
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
                parsed = parse_page(page, metadata)
        except ExtractionError as exc:
            report.fail(url, exc.message)
            continue
        except Exception as exc:  # a parser bug on one odd page must not stop the run
            log.debug("unexpected error on %s", url, exc_info=True)
            report.fail(url, f"cannot extract: {type(exc).__name__}: {exc}")
            continue
        if follow and _site(page.final_url) in sites:
            for link in parsed.links:
                if _site(link) in sites and link not in seen and _looks_like_page(link):
                    queue.append((link, depth + 1))
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
    fetcher = Fetcher(settings)
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
