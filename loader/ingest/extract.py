"""Text extraction: Markdown, plain text, HTML and PDF into a title, sections and metadata.

A :class:`Section` is a run of paragraphs (separated by blank lines) under one heading path, so
chunking can split at paragraph boundaries first and every chunk knows where it sits
("Chapter 11. Indexes > 11.2. Index Types > 11.2.1. B-Tree").

Libraries: BeautifulSoup over lxml for HTML (navigation chrome is dropped: ``<nav>``, scripts,
styles, the PostgreSQL manual's ``div.navheader``/``div.navfooter`` and its per-page table of
contents), markdown-it-py for Markdown headings (so ``#`` lines inside code fences are not taken
for headings), pypdf for PDF. Every problem with one file is an :class:`ExtractionError` whose
message says what is wrong with it; the caller reports it and goes on with the other files.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import warnings
from pathlib import Path
from typing import Any

from loader.errors import PgkbError


class ExtractionError(PgkbError):
    """One file cannot be turned into text (the reason is the message)."""

    exit_code = 1


@dataclasses.dataclass(frozen=True)
class Section:
    """Paragraphs (joined by blank lines) under one heading path (outermost heading first)."""

    heading_path: tuple[str, ...]
    text: str

    @property
    def heading(self) -> str:
        return " > ".join(self.heading_path)


@dataclasses.dataclass(frozen=True)
class Extracted:
    title: str | None
    sections: list[Section]
    metadata: dict[str, Any]
    links: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """``(href, anchor text)`` of the document's hyperlinks as written, in order, outside
    navigation and tables of contents (HTML ``<a href>``, Markdown links)."""


FORMATS: dict[str, str] = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/plain",
    ".html": "text/html",
    ".htm": "text/html",
    ".xhtml": "text/html",
    ".pdf": "application/pdf",
}
"""File extensions pgkb ingests and their MIME types."""


def mime_type(path: str | Path) -> str | None:
    return FORMATS.get(Path(path).suffix.lower())


_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANKS = re.compile(r"\n\s*\n+")


def normalize_inline(text: str) -> str:
    """Collapse all whitespace (newlines included) to single spaces."""
    return " ".join(text.split())


def _clean_block(text: str) -> str:
    """Tidy a block of running text: spaces collapsed, paragraphs kept, trailing blanks gone."""
    lines = [_SPACES.sub(" ", line).strip() for line in text.splitlines()]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def extract(data: bytes, path: str | Path, mime: str | None = None) -> Extracted:
    """Extract ``data`` (the bytes of ``path``) by its MIME type (default: from the extension)."""
    mime = mime or mime_type(path)
    if mime is None:
        raise ExtractionError(f"unsupported file type {Path(path).suffix or '(none)'}")
    if not data.strip():
        raise ExtractionError("empty file (no text to index)")
    if mime == "application/pdf":
        result = extract_pdf(data)
    else:
        if b"\x00" in data[:8192]:
            raise ExtractionError(
                f"binary content in a {Path(path).suffix} file (NUL bytes): not text"
            )
        nul = data.find(b"\x00")
        if nul >= 0:  # PostgreSQL text cannot hold a NUL character
            raise ExtractionError(
                f"NUL byte at byte {nul}: PostgreSQL text cannot hold it; remove it "
                "(e.g. tr -d '\\000' < file > fixed) and ingest again"
            )
        if mime == "text/html":
            result = extract_html(data)
        else:
            text = decode_text(data)
            result = extract_markdown(text) if mime == "text/markdown" else extract_text(text)
    if not any(s.text.strip() for s in result.sections):
        raise ExtractionError("no text found in the document")
    return result


def decode_text(data: bytes) -> str:
    """UTF-8 (with or without BOM); anything else is an error naming the offending byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"invalid UTF-8 at byte {exc.start} (0x{data[exc.start]:02x}); "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


# --- plain text and Markdown --------------------------------------------------------------------


def extract_text(text: str) -> Extracted:
    return Extracted(title=None, sections=[Section((), _clean_block(text))], metadata={})


def extract_markdown(text: str) -> Extracted:
    """Sections split at ATX and setext headings (found by markdown-it-py, not by regex)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    tokens = md.parse(text)
    lines = text.splitlines()
    headings: list[tuple[int, int, int, str]] = []  # (start line, end line, level, text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            level = int(token.tag[1])
            inline = tokens[i + 1]
            headings.append((token.map[0], token.map[1], level, normalize_inline(inline.content)))

    links = _markdown_links(tokens)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    title: str | None = None
    cursor = 0
    path: tuple[str, ...] = ()
    for start, end, level, heading in headings:
        body = _clean_block("\n".join(lines[cursor:start]))
        if body:
            sections.append(Section(path, body))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        path = tuple(h for _, h in stack)
        if title is None and level == 1:
            title = heading
        cursor = end
    body = _clean_block("\n".join(lines[cursor:]))
    if body:
        sections.append(Section(path, body))
    if title is None and headings:
        title = headings[0][3]
    return Extracted(title=title or None, sections=sections, metadata={}, links=links)


def _markdown_links(tokens: Any) -> list[tuple[str, str]]:
    """``(href, anchor text)`` of the links in markdown-it tokens (none inside code)."""
    links: list[tuple[str, str]] = []
    for inline in tokens:
        if inline.type != "inline" or not inline.children:
            continue
        href: str | None = None
        text: list[str] = []
        for child in inline.children:
            if child.type == "link_open":
                href, text = str(child.attrs.get("href") or ""), []
            elif child.type == "link_close" and href is not None:
                if href:
                    links.append((href, normalize_inline("".join(text))))
                href = None
            elif href is not None:
                text.append(child.content)
    return links


# --- HTML ---------------------------------------------------------------------------------------

_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
# DocBook admonitions (the PostgreSQL manual's notes and tips) title themselves with a heading
# tag: "Note" is a label of the paragraphs that follow, not a section of the page
_ADMONITIONS = {"note", "tip", "warning", "important", "caution"}
EXTRACTOR_VERSION = 2
"""Bumped when extraction changes what a document's sections are, so a re-ingest re-parses
every file (chunks whose text is unchanged keep their embeddings). 2: admonition titles."""
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hr",
    "li", "main", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot",
    "th", "thead", "tr", "ul", "br",
}  # fmt: skip
_DROP_TAGS = ["script", "style", "noscript", "template", "nav", "iframe", "svg", "button", "form"]
_DROP_SELECTORS = [
    "div.navheader",
    "div.navfooter",
    "[role=navigation]",
    "[aria-hidden=true]",
    "a.indexterm",
]


def extract_html(data: bytes) -> Extracted:
    """Title, heading-path sections and metadata of an HTML page, without its navigation."""
    from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        # XHTML pages (the PostgreSQL manual's) are parsed as HTML on purpose: lxml's HTML
        # parser is lenient where its XML parser stops at the first error
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(data, "lxml")
    metadata: dict[str, Any] = {}
    title_tag = soup.find("title")
    title = normalize_inline(title_tag.get_text()) if title_tag else ""

    # the PostgreSQL manual (DocBook) names the page's parent in its navigation header
    parent: str | None = None
    up = soup.select_one("div.navheader a[accesskey=u]") or soup.select_one("link[rel=up]")
    if isinstance(up, Tag) and up.get("title"):
        parent = normalize_inline(str(up.get("title")))
        metadata["parent"] = parent
    lang = soup.html.get("lang") if soup.html else None
    if lang:
        metadata["language"] = str(lang)
    description = soup.find("meta", attrs={"name": "description"})
    if isinstance(description, Tag) and description.get("content"):
        metadata["description"] = normalize_inline(str(description.get("content")))

    # the manual's back-of-the-book index links with a.indexterm, dropped from the text below
    index_links = [
        (str(a.get("href")), normalize_inline(a.get_text(" ")))
        for a in soup.select("a.indexterm[href]")
        if not a.find_parent(["nav"])
        and not a.find_parent("div", class_=["navheader", "navfooter"])
    ]
    for name in _DROP_TAGS:
        for tag in soup.find_all(name):
            tag.decompose()
    for selector in _DROP_SELECTORS:
        for tag in soup.select(selector):
            tag.decompose()

    body = soup.body or soup
    root = tuple(h for h in (parent, title) if h)
    # a page's table of contents repeats headings found elsewhere: set aside, unless the page
    # is nothing but its contents (a chapter's index page), which is then what it says
    tocs = [toc.extract() for toc in body.select("div.toc")]
    links = index_links + [
        (str(a.get("href")), normalize_inline(a.get_text(" ")))
        for a in body.find_all("a", href=True)
    ]
    walker = _HtmlWalker(root)
    walker.walk(body)
    walker.flush_section()
    if not any(s.text for s in walker.sections) and tocs:
        for toc in tocs:
            walker.walk(toc)
        walker.flush_section()
    sections = walker.sections
    if not title:
        first = body.find(list(_HEADINGS))
        title = normalize_inline(first.get_text()) if first else ""
    return Extracted(title=title or None, sections=sections, metadata=metadata, links=links)


def _is_admonition_title(heading: Any) -> bool:
    """True for the title heading of a note, tip, warning, important or caution box."""
    parent = heading.parent
    if parent is None or parent.name != "div":
        return False
    return any(c in _ADMONITIONS for c in parent.get("class") or [])


class _HtmlWalker:
    """Walks the DOM in order: headings open sections, block elements become paragraphs."""

    def __init__(self, root: tuple[str, ...]) -> None:
        self.root = root  # (parent page, page title): outside the page's own headings
        self.stack: list[tuple[int, str]] = []
        self.paragraphs: list[str] = []
        self.inline: list[str] = []
        self.sections: list[Section] = []

    @property
    def path(self) -> tuple[str, ...]:
        headings = [h for _, h in self.stack]
        while headings and headings[0] in self.root:
            headings.pop(0)
        return self.root + tuple(headings)

    def flush_inline(self) -> None:
        text = normalize_inline("".join(self.inline))
        self.inline = []
        if text:
            self.paragraphs.append(text)

    def flush_section(self) -> None:
        self.flush_inline()
        text = "\n\n".join(self.paragraphs)
        self.paragraphs = []
        if text.strip():
            self.sections.append(Section(self.path, text))

    def walk(self, node: Any) -> None:
        """Walk ``node``'s subtree in document order, without recursion (a page may nest
        elements 100,000 deep) and in time linear in its size (which elements hold blocks is
        found in one pass, not searched for at every level)."""
        from bs4.element import (
            Comment,
            Declaration,
            Doctype,
            NavigableString,
            ProcessingInstruction,
            Tag,
        )

        holders = _block_holders(node)
        # (children still to visit, flush the inline text when they are done)
        stack: list[tuple[Any, bool]] = [(iter(node.contents), False)]
        while stack:
            children, flush_after = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                if flush_after:
                    self.flush_inline()
                continue
            if isinstance(child, Comment | Declaration | Doctype | ProcessingInstruction):
                continue
            if isinstance(child, NavigableString):
                self.inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _HEADINGS and _is_admonition_title(child):
                self.flush_inline()
                label = normalize_inline(child.get_text(" "))
                if label:
                    self.paragraphs.append(label + ":")
                continue
            if name in _HEADINGS:
                self.flush_section()
                level = int(name[1])
                heading = normalize_inline(child.get_text(" "))
                if heading:
                    while self.stack and self.stack[-1][0] >= level:
                        self.stack.pop()
                    self.stack.append((level, heading))
                continue
            if name == "pre":
                self.flush_inline()
                text = child.get_text().strip("\n")
                if text.strip():
                    self.paragraphs.append(text.rstrip())
                continue
            if name == "tr":
                self.flush_inline()
                cells = [normalize_inline(c.get_text(" ")) for c in child.find_all(["td", "th"])]
                row = " | ".join(c for c in cells if c)
                if row:
                    self.paragraphs.append(row)
                continue
            if name in _BLOCKS:
                self.flush_inline()
                if id(child) in holders:
                    stack.append((iter(child.contents), True))
                else:
                    text = normalize_inline(child.get_text(" " if name in ("td", "th") else ""))
                    if text:
                        self.paragraphs.append(text)
                continue
            # inline element: may still hide a block (e.g. <span><div>...</div></span>)
            if id(child) in holders:
                stack.append((iter(child.contents), False))
            else:
                self.inline.append(child.get_text())


_BLOCK_NAMES = frozenset(_BLOCKS | _HEADINGS)


def _block_holders(root: Any) -> set[int]:
    """``id()`` of every element under ``root`` that has a block or heading element below it:
    one pass over the subtree (each ancestor chain is climbed only up to the first element
    already marked), so the walk never searches a subtree again at every level."""
    from bs4.element import Tag

    holders: set[int] = set()
    for tag in root.descendants:
        if not isinstance(tag, Tag) or tag.name not in _BLOCK_NAMES:
            continue
        parent = tag.parent
        while parent is not None and parent is not root and id(parent) not in holders:
            holders.add(id(parent))
            parent = parent.parent
    return holders


# --- PDF ----------------------------------------------------------------------------------------


def _no_nul(text: str) -> str:
    """PDF strings may carry NUL characters (UTF-16 leftovers, padding); they mean nothing and
    PostgreSQL text and jsonb cannot hold them, so they are dropped."""
    return text.replace("\x00", "")


def extract_pdf(data: bytes) -> Extracted:
    """Text per page (pypdf); one section per page under the document's outline, if any."""
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                ok = reader.decrypt("")
            except Exception as exc:  # missing AES backend, malformed encryption dictionary
                raise ExtractionError(
                    f"encrypted PDF that cannot be opened ({exc}); decrypt it first "
                    "(e.g. qpdf --decrypt in.pdf out.pdf)"
                ) from None
            if not ok:
                raise ExtractionError(
                    "encrypted PDF (a password is needed); decrypt it first "
                    "(e.g. qpdf --password=... --decrypt in.pdf out.pdf)"
                )
        pages = list(reader.pages)
        texts = [_clean_block(_no_nul(page.extract_text() or "")) for page in pages]
        info = reader.metadata
    except FileNotDecryptedError:
        raise ExtractionError("encrypted PDF (a password is needed); decrypt it first") from None
    except ExtractionError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise ExtractionError(f"unreadable PDF: {exc}") from None

    metadata: dict[str, Any] = {"page_count": len(pages)}
    title = None
    if info is not None:
        if info.title and _no_nul(str(info.title)).strip():
            title = normalize_inline(_no_nul(str(info.title)))
        if info.author and _no_nul(str(info.author)).strip():
            metadata["author"] = normalize_inline(_no_nul(str(info.author)))
    if not any(texts):
        raise ExtractionError(
            f"PDF with no text layer ({len(pages)} pages, no extractable text: a scan?); "
            "run OCR on it first (e.g. ocrmypdf)"
        )
    sections = [
        Section((f"Page {number}",), text) for number, text in enumerate(texts, start=1) if text
    ]
    return Extracted(title=title, sections=sections, metadata=metadata)
