"""``pgkb ingest URL`` against a local web site the test serves: real pages of the PostgreSQL
manual (the bundled sample, under the PostgreSQL License), a redirect, a 404, a slow page, a
page with a canonical URL, a robots.txt and a sitemap. Checked: the main text is ingested under
the canonical URL, robots.txt is obeyed, failures name the URL and the run goes on, an
unchanged site answers 304s and nothing is embedded again, a changed page is replaced, the
crawl keeps to its depth, its page limit and its site; bad URLs get a clear error.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.resources import sample_corpus_dir

pytestmark = pytest.mark.model

PAGES = ("sql-createindex.html", "routine-vacuuming.html", "gin-intro.html", "brin-intro.html")


class Site:
    """A small web site on 127.0.0.1: files from the sample corpus plus scripted routes; every
    request is recorded (path, status, conditional headers)."""

    def __init__(self) -> None:
        sample = sample_corpus_dir()
        self.files: dict[str, bytes] = {f"/{n}": (sample / n).read_bytes() for n in PAGES}
        links = "".join(f'<li><a href="{n}">{n}</a></li>' for n in PAGES)
        self.files["/index.html"] = (
            "<html><head><title>Manual index</title></head><body><main><h1>Manual index</h1>"
            "<p>The pages of this small manual, and a few links that go wrong.</p>"
            f"<ul>{links}<li><a href='/missing.html'>missing</a></li>"
            "<li><a href='/private/secret.html'>secret</a></li>"
            "<li><a href='/slow.html'>slow</a></li>"
            "<li><a href='/old-vacuum'>old vacuum link</a></li>"
            "<li><a href='https://elsewhere.invalid/page.html'>another site</a></li>"
            "<li><a href='/logo.png'>logo</a></li></ul></main></body></html>"
        ).encode()
        self.files["/private/secret.html"] = b"<html><body><p>secret salaries</p></body></html>"
        self.files["/robots.txt"] = b"User-agent: *\nDisallow: /private/\n"
        self.files["/alias.html"] = self.files["/gin-intro.html"].replace(
            b"<head>", b'<head><link rel="canonical" href="/gin-intro.html">', 1
        )
        self.requests: list[tuple[str, int, str | None]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def sitemap(self, *paths: str) -> None:
        locs = "".join(f"<url><loc>{self.url}{p}</loc></url>" for p in paths)
        self.files["/sitemap.xml"] = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
        ).encode()

    def statuses(self, path: str) -> list[int]:
        with self.lock:
            return [status for p, status, _ in self.requests if p == path]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes = b"", **headers: str) -> None:
                with site.lock:
                    site.requests.append((self.path, status, self.headers.get("If-None-Match")))
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key.replace("_", "-"), value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the slow page)

            def do_GET(self) -> None:
                if self.path == "/slow.html":
                    time.sleep(3)  # past the test's web_timeout of 1 s
                    self._send(200, b"<html><body><p>too late</p></body></html>")
                    return
                if self.path == "/old-vacuum":
                    self._send(301, Location="/routine-vacuuming.html")
                    return
                body = site.files.get(self.path)
                if body is None:
                    self._send(404, b"not found", Content_Type="text/plain")
                    return
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    self._send(304, ETag=etag)
                    return
                kind = "application/xml" if self.path.endswith(".xml") else "text/html"
                if self.path.endswith(".txt"):
                    kind = "text/plain"
                self._send(200, body, Content_Type=f"{kind}; charset=utf-8", ETag=etag)

        return Handler


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def _ingest(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["ingest", *args, "--json"], env=env)
    return result.exit_code, json.loads(result.stdout), result.stderr


def _documents(url: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT source_uri, title, metadata, (SELECT count(*) FROM kb.chunks c "
            "WHERE c.document_id = d.id) FROM kb.documents d"
        ).fetchall()
    return {r[0]: {"title": r[1], "metadata": r[2], "chunks": r[3]} for r in rows}


def test_a_crawl_respects_robots_depth_and_limits_and_skips_unchanged_pages(
    site: Site, cli_env: dict[str, str], db_url: str
) -> None:
    env = {**cli_env, "PGKB_WEB_TIMEOUT": "1"}
    code, report, _ = _ingest(env, site.url + "/index.html", "--crawl-depth", "1")
    assert code == 1, report  # some pages failed, the rest were ingested
    docs = _documents(db_url)
    manual = {f"{site.url}/{n}" for n in PAGES}
    assert manual | {site.url + "/index.html"} == set(docs)
    create = docs[f"{site.url}/sql-createindex.html"]
    assert create["title"] == "CREATE INDEX" and create["chunks"] > 5
    assert create["metadata"]["http_etag"] and create["metadata"]["content_type"] == "text/html"
    failed = {f["source"]: f["reason"] for f in report["failed"]}
    assert "HTTP 404" in failed[site.url + "/missing.html"]
    assert "robots.txt" in failed[site.url + "/private/secret.html"]
    assert "web_timeout" in failed[site.url + "/slow.html"]
    assert site.statuses("/private/secret.html") == []  # never fetched
    assert site.statuses("/logo.png") == []  # not a page
    # the redirect landed on a page already ingested: one document, under its own URL
    assert site.statuses("/old-vacuum") == [301]
    assert report["new"] == len(docs)

    # the navigation of the manual's pages is gone, their text is there
    with psycopg.connect(db_url) as conn:
        text = " ".join(
            r[0]
            for r in conn.execute(
                "SELECT content FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
                "WHERE d.source_uri = %s",
                (f"{site.url}/sql-createindex.html",),
            )
        )
    assert "CONCURRENTLY" in text and "Prev" not in text.split()

    # again: every page answers 304 to its ETag, nothing is embedded
    before = len(site.requests)
    code, again, _ = _ingest(env, site.url + "/index.html", "--crawl-depth", "1")
    assert again["unchanged"] == len(docs), (again, site.requests[before:])
    assert again["new"] == again["changed"] == 0
    assert again["embeddings_computed"] == 0
    asked = [(p, s) for p, s, etag in site.requests[before:] if etag]
    assert {p for p, _ in asked} == {f"/{n}" for n in PAGES} and all(s == 304 for _, s in asked)

    # a changed page is replaced; the page limit stops the crawl and says so
    site.files["/gin-intro.html"] = site.files["/gin-intro.html"].replace(
        b"stands for Generalized Inverted Index.",
        b"stands for Generalized Inverted Index (a change).",
    )
    code, changed, _ = _ingest(
        env, site.url + "/index.html", "--crawl-depth", "1", "--max-pages", "3"
    )
    assert changed["files_seen"] == 3 and "max-pages" in changed["notes"][0]
    code, changed, _ = _ingest(env, site.url + "/gin-intro.html")
    assert changed["changed"] == 1 and code == 0


def test_sitemap_canonical_url_and_clear_errors(
    site: Site, cli_env: dict[str, str], db_url: str
) -> None:
    site.sitemap("/sql-createindex.html", "/alias.html", "/missing.html")
    code, report, _ = _ingest(cli_env, "--sitemap", site.url + "/sitemap.xml")
    assert code == 1
    docs = _documents(db_url)
    # the alias page is stored under its canonical URL
    assert set(docs) == {f"{site.url}/sql-createindex.html", f"{site.url}/gin-intro.html"}
    assert docs[f"{site.url}/gin-intro.html"]["metadata"]["url"] == site.url + "/alias.html"
    assert [f["source"] for f in report["failed"]] == [site.url + "/missing.html"]

    runner = CliRunner()
    for args, says in (
        (["ingest", "http://"], "has no host"),
        (["ingest", "http://[::1/page"], "not a valid URL"),
        (["ingest", "--sitemap", "ftp://example.org/sitemap.xml"], "not an http(s) URL"),
        (["ingest", site.url + "/index.html", "--watch"], "--watch follows files"),
        (["ingest"], "nothing to ingest"),
    ):
        result = runner.invoke(cli, args, env=cli_env)
        assert result.exit_code == 2, (args, result.output)
        assert says in result.output and "Traceback" not in result.output
    # a site that is not there: the URL named, exit 1
    refused = runner.invoke(cli, ["ingest", "http://127.0.0.1:9/page.html", "--json"], env=cli_env)
    assert refused.exit_code == 1
    failure = json.loads(refused.stdout)["failed"][0]
    assert failure["source"] == "http://127.0.0.1:9/page.html"
    assert "robots.txt could not be read" in failure["reason"]


def test_a_page_in_a_folder_and_a_url_in_one_run(
    site: Site, cli_env: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "notes.md").write_text("# Notes\n\nLocal notes about vacuuming.\n")
    code, report, _ = _ingest(cli_env, str(tmp_path / "notes.md"), site.url + "/brin-intro.html")
    assert code == 0 and report["new"] == 2 and report["files_seen"] == 2
    assert set(_documents(db_url)) == {str(tmp_path / "notes.md"), site.url + "/brin-intro.html"}
