"""Review 4, the web crawler tried as a hostile site: redirects and sitemap entries to other
origins, a huge robots.txt, decompression bombs (a zstd page, a gzip sitemap), a server that
trickles, pages in other charsets, a page of 200,000 links. Real HTTP servers on 127.0.0.1
started here (never any other address), ``pgkb ingest`` run as a command (in a child process
where its memory is measured), the fake embeddings API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings, settings_env

ROOT = Path(__file__).resolve().parents[2]
TEXT = (
    "Autovacuum removes dead row versions so that tables do not bloat; it also refreshes "
    "the planner statistics. "
)

Route = Callable[[BaseHTTPRequestHandler], None]


class Server:
    """An HTTP server on 127.0.0.1 answering scripted routes; every request path is recorded and
    the bytes each route wrote are counted."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []
        self.sent: dict[str, int] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with server.lock:
                    server.requests.append(self.path)
                route = server.routes.get(self.path)
                try:
                    if route is None:
                        server.reply(self, 404, b"not found", "text/plain")
                    else:
                        route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: what a cap does

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def count(self, path: str, n: int) -> None:
        with self.lock:
            self.sent[path] = self.sent.get(path, 0) + n

    def reply(
        self, h: BaseHTTPRequestHandler, status: int, body: bytes, kind: str, **headers: str
    ) -> None:
        h.send_response(status)
        h.send_header("Content-Type", kind)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Connection", "close")
        for key, value in headers.items():
            h.send_header(key.replace("_", "-"), value)
        h.end_headers()
        h.wfile.write(body)
        self.count(h.path, len(body))

    def page(self, path: str, body: bytes, kind: str = "text/html", **headers: str) -> None:
        self.routes[path] = lambda h: self.reply(h, 200, body, kind, **headers)

    def redirect(self, path: str, to: str) -> None:
        self.routes[path] = lambda h: self.reply(h, 302, b"", "text/plain", Location=to)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def servers() -> Iterator[Callable[[], Server]]:
    started: list[Server] = []

    def start() -> Server:
        server = Server()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def html(title: str, body: str) -> bytes:
    return (
        f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1>"
        f"<p>{body}</p><p>{TEXT * 3}</p></main></body></html>"
    ).encode()


def _ingest(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["ingest", *args, "--json"], env=env)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout)


def _texts(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT d.source_uri, d.title || ' ' || string_agg(c.content, ' ' "
            "ORDER BY c.chunk_index) FROM kb.documents d JOIN kb.chunks c "
            "ON c.document_id = d.id GROUP BY d.source_uri, d.title"
        ).fetchall()
    return dict(rows)


def _reasons(report: dict[str, Any]) -> dict[str, str]:
    return {f["source"]: f["reason"] for f in report["failed"]}


@pytest.fixture
def env(db_url: str, tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    return settings_env(ingest_settings(db_url, tmp_path, fake_openai))


# --- origins ----------------------------------------------------------------------------------


def test_redirects_links_and_sitemap_entries_stay_on_the_origins_given(
    servers: Callable[[], Server], env: dict[str, str], db_url: str
) -> None:
    a, b = servers(), servers()  # two origins: 127.0.0.1 on two ports
    b.page("/robots.txt", b"User-agent: *\nDisallow: /private/\n", "text/plain")
    b.page("/page.html", html("Other origin", "A page of the second server."))
    b.page("/private/secret.html", html("Secret", "The vault code is kiwi-7731."))
    a.page("/index.html", html("Start", f"<a href='{b.url}/page.html'>elsewhere</a>"))
    a.redirect("/go", f"{b.url}/page.html")
    a.redirect("/go-private", f"{b.url}/private/secret.html")
    a.page(
        "/sitemap.xml",
        (
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{a.url}/index.html</loc></url><url><loc>{b.url}/page.html</loc></url>"
            "</urlset>"
        ).encode(),
        "application/xml",
    )

    code, report = _ingest(
        env, f"{a.url}/index.html", f"{a.url}/go", "--sitemap", f"{a.url}/sitemap.xml",
        "--crawl-depth", "1",
    )  # fmt: skip
    assert code == 1, report
    assert b.requests == [], b.requests  # not one request reached the other origin
    reasons = _reasons(report)
    assert "another origin" in reasons[f"{a.url}/go"], reasons
    assert f"--allow-origin {b.url}" in reasons[f"{a.url}/go"], reasons
    assert "other origins" in reasons[f"{a.url}/sitemap.xml"], reasons
    assert set(_texts(db_url)) == {f"{a.url}/index.html"}

    # named, the other origin is followed; its own robots.txt judges the redirect's target
    code, report = _ingest(
        env, f"{a.url}/go", f"{a.url}/go-private", "--allow-origin", b.url
    )  # fmt: skip
    reasons = _reasons(report)
    assert "disallowed by" in reasons[f"{a.url}/go-private"], reasons
    assert "/robots.txt" in b.requests and "/private/secret.html" not in b.requests, b.requests
    texts = _texts(db_url)
    assert f"{b.url}/page.html" in texts
    assert not any("kiwi-7731" in t for t in texts.values())


# --- robots.txt, bodies and bombs --------------------------------------------------------------


def test_a_huge_robots_txt_is_read_only_up_to_its_cap(
    servers: Callable[[], Server], env: dict[str, str], db_url: str
) -> None:
    site = servers()
    head = b"User-agent: *\nDisallow: /private/\n"
    filler = b"# " + b"x" * 1021 + b"\n"  # 1 KiB lines, 60 MB in all

    def robots(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(head) + 60 * 1024 * len(filler)))
        h.end_headers()
        h.wfile.write(head)
        for _ in range(60 * 1024):
            h.wfile.write(filler)
            site.count(h.path, len(filler))

    site.routes["/robots.txt"] = robots
    site.page("/page.html", html("Page", "Allowed."))
    site.page("/private/p.html", html("Private", "Not allowed."))
    code, report = _ingest(env, f"{site.url}/page.html", f"{site.url}/private/p.html")
    assert code == 1, report
    assert "disallowed by" in _reasons(report)[f"{site.url}/private/p.html"]
    assert any("web_robots_max_kb" in n and "robots.txt" in n for n in report["notes"]), report
    time.sleep(0.5)
    # before: all 60 MB read (a 400 MB one took 1.3 GB); now the client hangs up after 500
    # KiB, and what the server wrote is that plus the sockets' buffers
    assert site.sent["/robots.txt"] < 12_000_000, site.sent
    assert set(_texts(db_url)) == {f"{site.url}/page.html"}


def _gzip(size: int) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = b"<!-- " + b" " * (1 << 20) + b" -->"
    out = [packer.compress(block) for _ in range(size >> 20)]
    return b"".join([*out, packer.flush()])


def _zstd(size: int) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    packer = zstandard.ZstdCompressor().compressobj()
    block = b" " * (1 << 20)
    out = [packer.compress(b"<html>")] + [packer.compress(block) for _ in range(size >> 20)]
    return b"".join([*out, packer.flush()])


def _run_measured(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str, float]:
    """``pgkb ingest ... --json`` as a child process: exit code, report, stderr and its peak
    resident memory in MB: the highest ``VmHWM`` of ``/proc/PID/status`` read while it runs
    (its own address space's high-water mark; ``wait4``'s ``ru_maxrss`` starts from the
    parent's peak at the fork, which a full suite's process has raised to gigabytes)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "from loader.cli import main; main()", "ingest", *args, "--json"],
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda: out.update(o=process.stdout.read())),  # type: ignore[union-attr]
        threading.Thread(target=lambda: out.update(e=process.stderr.read())),  # type: ignore[union-attr]
    ]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    peak_kb = 0
    while True:
        peak_kb = max(peak_kb, _high_water_kb(process.pid))
        pid, status, _usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > 300:
            process.kill()
            pytest.fail("pgkb ingest did not end within 300 s")
        time.sleep(0.02)
    for reader in readers:
        reader.join(30)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = out["e"].decode()
    assert peak_kb > 0, "the child's memory was never read"
    print(f"pgkb ingest {' '.join(args[:1])}...: peak resident memory {peak_kb / 1024:.0f} MB")
    return process.returncode, json.loads(out["o"]), stderr, peak_kb / 1024


def _high_water_kb(pid: int) -> int:
    """``VmHWM`` of process ``pid`` in kB (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return 0
    return 0


def test_decompression_bombs_are_cut_while_they_stream(
    servers: Callable[[], Server], env: dict[str, str], db_url: str
) -> None:
    site = servers()
    gigabyte = 1 << 30
    site.page("/robots.txt", b"", "text/plain")
    site.page("/zstd.html", _zstd(gigabyte), "text/html", Content_Encoding="zstd")
    site.page("/gzip.html", _gzip(gigabyte), "text/html", Content_Encoding="gzip")
    site.page("/sitemap.xml.gz", _gzip(gigabyte), "application/x-gzip")
    site.page("/ok.html", html("Fine", "A page of normal size."))
    code, report, stderr, peak_mb = _run_measured(
        {**env, "PGKB_MAX_FILE_MB": "5", "PGKB_WEB_SITEMAP_MAX_MB": "5"},
        f"{site.url}/zstd.html", f"{site.url}/gzip.html", f"{site.url}/ok.html",
        "--sitemap", f"{site.url}/sitemap.xml.gz",
    )  # fmt: skip
    assert "Traceback" not in stderr, stderr
    assert code == 1, (report, stderr)
    reasons = _reasons(report)
    for path in ("/zstd.html", "/gzip.html"):
        assert "max_file_mb (5 MB) once decompressed" in reasons[site.url + path], reasons
    assert "web_sitemap_max_mb (5 MB) once decompressed" in reasons[f"{site.url}/sitemap.xml.gz"], (
        reasons
    )
    assert set(_texts(db_url)) == {f"{site.url}/ok.html"}
    # each bomb inflates to 1 GiB; before, the zstd page was decoded whole in one call and the
    # gzip sitemap by gzip.decompress
    assert peak_mb < 600, f"peak resident memory {peak_mb:.0f} MB"


def test_a_trickling_server_is_cut_at_the_deadline(
    servers: Callable[[], Server], env: dict[str, str], db_url: str
) -> None:
    site = servers()
    site.page("/robots.txt", b"", "text/plain")
    site.page("/ok.html", html("Fine", "A page of normal size."))
    body = html("Slow", "Sent a byte at a time.")[:60]

    def trickle_body(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        for i in range(len(body)):  # 15 s in all, each byte well within web_timeout
            h.wfile.write(body[i : i + 1])
            h.wfile.flush()
            time.sleep(0.25)

    def trickle_head(h: BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Padding: " + b"p" * 80
        for i in range(len(head)):  # 20 s of headers
            h.wfile.write(head[i : i + 1])
            h.wfile.flush()
            time.sleep(0.2)

    site.routes["/body.html"] = trickle_body
    site.routes["/head.html"] = trickle_head
    started = time.monotonic()
    code, report = _ingest(
        {**env, "PGKB_WEB_TIMEOUT": "2", "PGKB_WEB_DEADLINE": "3"},
        f"{site.url}/body.html", f"{site.url}/head.html", f"{site.url}/ok.html",
    )  # fmt: skip
    took = time.monotonic() - started
    assert code == 1, report
    reasons = _reasons(report)
    for path in ("/body.html", "/head.html"):
        assert "web_deadline (3 s" in reasons[site.url + path], reasons
    assert set(_texts(db_url)) == {f"{site.url}/ok.html"}
    # before: the body held its fetch for its 15 s, the headers theirs for 20 s (and then
    # web_timeout, as they never end)
    assert took < 30, f"took {took:.0f} s"


# --- charsets -----------------------------------------------------------------------------------


def test_pages_in_other_charsets_are_read_in_theirs(
    servers: Callable[[], Server], env: dict[str, str], db_url: str
) -> None:
    site = servers()
    site.page("/robots.txt", b"", "text/plain")
    latin = "Le café du coin sert une crème brûlée. " + TEXT
    site.page("/latin1.txt", latin.encode("iso-8859-1"), "text/plain; charset=iso-8859-1")
    quotes = "“Smart quotes” cost 5 € — a windows-1252 page."
    site.page(
        "/cp1252.html",
        b'<html><head><meta charset="windows-1252"><title>Quotes</title></head><body><main>'
        + f"<h1>Quotes</h1><p>{quotes}</p><p>{TEXT * 3}</p></main></body></html>".encode("cp1252"),
        "text/html",
    )
    japanese = "東京の図書館は午前九時に開館します。"
    site.page(
        "/sjis.html",
        f"<html><head><title>図書館</title></head><body><main><h1>図書館</h1><p>{japanese}</p>"
        f"<p>{TEXT * 3}</p></main></body></html>".encode("shift_jis"),
        "text/html; charset=Shift_JIS",
    )
    site.page(
        "/eucjp.html",
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=EUC-JP">'
        f"<title>開館</title></head><body><main><h1>開館</h1><p>{japanese}</p>"
        f"<p>{TEXT * 3}</p></main></body></html>".encode("euc_jp"),
        "text/html",
    )
    pages = ("latin1.txt", "cp1252.html", "sjis.html", "eucjp.html")
    code, report = _ingest(env, *(f"{site.url}/{p}" for p in pages))
    assert code == 0, report
    texts = _texts(db_url)
    assert "café du coin sert une crème brûlée" in texts[f"{site.url}/latin1.txt"]
    assert "“Smart quotes” cost 5 €" in texts[f"{site.url}/cp1252.html"]
    assert japanese in texts[f"{site.url}/sjis.html"]
    assert texts[f"{site.url}/sjis.html"].startswith("図書館")  # the title too
    assert japanese in texts[f"{site.url}/eucjp.html"]


# --- a page of 200,000 links --------------------------------------------------------------------


def test_a_page_of_many_links_is_ingested_with_its_links_capped(
    servers: Callable[[], Server], env: dict[str, str], db_url: str
) -> None:
    site = servers()
    site.page("/robots.txt", b"", "text/plain")
    links = "".join(f'<a href="/p{i}.html">{i}</a> ' for i in range(200_000))
    site.page(
        "/links.html",
        f"<html><head><title>Links</title></head><body><main><h1>Links</h1><p>{TEXT * 3}</p>"
        f"<nav>{links}</nav></main></body></html>".encode(),
    )
    for i in range(3):
        site.page(f"/p{i}.html", html(f"Page {i}", "One of the linked pages."))
    code, report, stderr, peak_mb = _run_measured(
        {**env, "PGKB_WEB_MAX_LINKS": "1000"},
        f"{site.url}/links.html", "--crawl-depth", "1", "--max-pages", "3",
    )  # fmt: skip
    assert "Traceback" not in stderr, stderr
    assert code == 0, (report, stderr)
    assert any(
        "only its first 1000 links" in n and "199000 more" in n and "web_max_links" in n
        for n in report["notes"]
    ), report
    texts = _texts(db_url)
    assert "Autovacuum removes dead row versions" in texts[f"{site.url}/links.html"]
    assert {f"{site.url}/p0.html", f"{site.url}/p1.html"} <= set(texts)
    assert peak_mb < 900, f"peak resident memory {peak_mb:.0f} MB"
