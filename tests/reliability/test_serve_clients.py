"""``pgkb serve`` under hostile clients: what its request guard and its connection handling hold.

The server here is the real uvicorn configuration ``pgkb serve`` runs (``server_config``) and the
real guard (``Guard``: Host check, token, body limits, concurrency queue), in front of a stub
ASGI app whose requests take as long as a test wants: so the limits are seen without the model
or the database, with raw sockets for clients that send nothing, or a byte at a time. Every wait
is a poll with a deadline, never a fixed sleep standing for "long enough".
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from loader.serve.guard import Guard, Pages
from loader.web.app import FORM_PATHS, error_page, wants_page
from tests.helpers import uvicorn_thread
from tests.processes import CollKb, Served, wait_until


class Stub:
    """A stub app: ``POST /v1/search`` reads its JSON body and answers once ``gate`` is set (or
    after ``hold`` seconds); it counts the requests in flight."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self.gate = threading.Event()
        self.in_flight = 0
        self.most = 0
        self.lock = threading.Lock()

    def app(self) -> Starlette:
        async def search(request: Request) -> Response:
            body = json.loads(await request.body() or b"{}")
            with self.lock:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
            try:
                if self.hold:
                    await anyio.sleep(self.hold)
                else:
                    await anyio.to_thread.run_sync(lambda: self.gate.wait(60))
            finally:
                with self.lock:
                    self.in_flight -= 1
            return JSONResponse({"ok": True, "echo": body})

        async def healthz(request: Request) -> Response:
            return JSONResponse({"status": "ok"})

        return Starlette(
            routes=[
                Route("/v1/search", search, methods=["POST"]),
                Route("/healthz", healthz, methods=["GET"]),
            ]
        )


def raw(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if data:
        sock.sendall(data)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (what it sent before, if anything, is read)."""
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def read_response(sock: socket.socket, seconds: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the one response the server sends on ``sock``."""
    sock.settimeout(seconds)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"closed without a response: {data!r}"
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        piece = sock.recv(65536)
        assert piece, "closed mid-body"
        body += piece
    return int(lines[0].split()[1]), headers, body


def post(port: int, payload: Any = None, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("timeout", 60)
    return httpx.post(f"http://127.0.0.1:{port}/v1/search", json=payload or {"q": 1}, **kwargs)


def guard(stub: Stub, **options: Any) -> Guard:
    options.setdefault("token", None)
    options.setdefault("max_body", 64_000)
    options.setdefault("concurrency", 8)
    options.setdefault("queue_timeout", 30.0)
    return Guard(stub.app(), **options)


def test_sixty_four_idle_connections_do_not_turn_requests_away() -> None:
    stub = Stub(hold=0.01)
    with uvicorn_thread(guard(stub), header_timeout=2.0) as port:
        idle = [raw(port) for _ in range(64)]  # connect, send nothing
        half = [raw(port, b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(8)]
        try:
            for _ in range(5):
                response = post(port)
                assert response.status_code == 200, response.text
            # the server closes connections that send no complete request head in time
            wait_until(
                lambda: all(closed_by_server(s) for s in idle + half), "idle closed", 30, 0.05
            )
        finally:
            for sock in idle + half:
                sock.close()
        assert post(port).status_code == 200


def test_slow_bodies_hold_no_concurrency_slot_and_are_cut_at_the_deadline() -> None:
    stub = Stub(hold=0.01)
    app = guard(stub, concurrency=8, queue_timeout=3.0, body_timeout=3.0)
    with uvicorn_thread(app) as port:
        body = json.dumps({"q": "x" * 40}).encode()
        head = (
            f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        slow = [raw(port, head + body[:1]) for _ in range(8)]
        stop = threading.Event()

        def trickle() -> None:  # one more byte every 0.2 s, never the whole body in time
            sent = 1
            while not stop.is_set() and sent < len(body) - 1:
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.sendall(body[sent : sent + 1])
                sent += 1
                stop.wait(0.2)

        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        try:
            for _ in range(3):  # the slots are free: the slow bodies are read outside them
                response = post(port, timeout=20)
                assert response.status_code == 200, response.text
            for sock in slow:  # each slow client gets a JSON 408 at the body deadline
                status, headers, answer = read_response(sock)
                assert status == 408, answer
                assert headers["content-type"].startswith("application/json")
                assert json.loads(answer)["error"]["type"] == "request_timeout"
        finally:
            stop.set()
            feeder.join(timeout=10)
            for sock in slow:
                sock.close()


def test_a_client_that_never_reads_its_response_is_cut_and_frees_its_slot() -> None:
    """A streamed answer waits for its client to read it: a client that never reads held its
    slot for as long as it kept the connection open (uvicorn has no write deadline), and a large
    body sat in memory. Past ``write_timeout`` without reading, the connection is cut."""

    async def stream(request: Request) -> Response:
        async def pieces() -> Any:
            for _ in range(400):  # 25 MB: more than any socket buffer holds
                yield b"data: " + b"x" * 65536 + b"\n\n"

        return StreamingResponse(pieces(), media_type="text/event-stream")

    async def ok(request: Request) -> Response:
        return JSONResponse({"ok": True})

    app = Guard(
        Starlette(routes=[Route("/v1/ask", stream, methods=["POST"]),
                          Route("/v1/search", ok, methods=["POST"])]),
        concurrency=1, queue_timeout=30.0,
    )  # fmt: skip
    with uvicorn_thread(app, write_timeout=1.0) as port:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", port))
        body = b'{"question": "x", "stream": true}'
        reader.sendall(
            b"POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        with contextlib.closing(reader):
            wait_until(lambda: app.slots.value == 0, "the stream holds the one slot", 30, 0.05)
            after = post(port)  # waits in the queue until the stream's slot is free
            assert after.status_code == 200, after.text
            wait_until(lambda: closed_by_server(reader), "the unread stream's connection cut", 30)


def test_above_the_limit_requests_queue_then_get_a_json_503() -> None:
    stub = Stub()
    app = guard(stub, concurrency=2, queue_timeout=60.0)
    with uvicorn_thread(app) as port, ThreadPoolExecutor(max_workers=100) as pool:
        # 100 at once, two served at a time: the others wait their turn, none turned away
        futures = [pool.submit(post, port, timeout=120) for _ in range(100)]
        wait_until(
            lambda: stub.in_flight == 2 and app.waiting == 98, "98 queued, 2 served", 60, 0.05
        )
        stub.gate.set()
        codes = [f.result(timeout=120).status_code for f in futures]
        assert codes == [200] * 100
        assert stub.most == 2

    held = Stub()  # requests wait until the test releases them
    app = guard(held, concurrency=1, queue_timeout=1.5, queue_size=3)
    with uvicorn_thread(app) as port, ThreadPoolExecutor(max_workers=8) as pool:
        first = pool.submit(post, port)
        wait_until(lambda: held.in_flight == 1, "the first request is being served", 30, 0.05)
        waiting = [pool.submit(post, port) for _ in range(3)]  # the queue's three places
        wait_until(lambda: app.waiting == 3, "three requests queued", 30, 0.05)
        over = post(port)  # a fourth finds the queue full: refused at once, as JSON
        assert over.status_code == 503 and over.headers["retry-after"]
        assert over.json()["error"]["type"] == "unavailable"
        assert "queue" in over.json()["error"]["message"]
        for future in waiting:  # the queued ones waited queue_timeout, then a JSON 503
            late = future.result(timeout=60)
            assert late.status_code == 503, late.text
            assert late.json()["error"]["type"] == "unavailable"
            assert "1.5 s" in late.json()["error"]["message"]
        held.gate.set()
        assert first.result(timeout=60).status_code == 200


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
        ("localhost", 200),
        ("[::1]:{port}", 200),
        ("kb.internal:{port}", 200),  # configured
        ("attacker.example:{port}", 421),  # a DNS rebinding page's own name
        ("127.0.0.1.nip.io:{port}", 421),
        ("", 421),
    ],
)
def test_the_host_header_must_name_this_server(host: str, status: int) -> None:
    stub = Stub(hold=0.001)
    with uvicorn_thread(guard(stub, allowed_hosts=("kb.internal",), bound="127.0.0.1")) as port:
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/search",
            json={"q": 1},
            headers={"Host": host.format(port=port)},
            timeout=30,
        )
        assert response.status_code == status, response.text
        if status == 421:
            assert response.json()["error"]["type"] == "misdirected_request"
            assert "allowed_hosts" in response.json()["error"]["message"]
        health = httpx.get(
            f"http://127.0.0.1:{port}/healthz", headers={"Host": host.format(port=port)}
        )
        assert health.status_code == (200 if status == 200 else 421)


def test_a_server_bound_to_every_address_accepts_its_addresses_not_other_names() -> None:
    stub = Stub(hold=0.001)
    with uvicorn_thread(guard(stub, bound="0.0.0.0")) as port:
        for host, status in (
            (f"10.1.2.3:{port}", 200),  # an address of the machine: not a rebinding page
            (f"[fd00::5]:{port}", 200),
            (f"localhost:{port}", 200),
            (f"intranet.example:{port}", 421),
        ):
            response = post(port, headers={"Host": host})
            assert response.status_code == status, (host, response.text)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",  # what a page's fetch() sends without a preflight
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,  # a Blob body without a type: no header at all
    ],
)
def test_bodies_that_are_not_declared_json_are_refused(content_type: str | None) -> None:
    stub = Stub(hold=0.001)
    with uvicorn_thread(guard(stub)) as port:
        headers = {"Content-Type": content_type} if content_type else {}
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/search",
            content=b'{"q": 1}',
            headers=headers,
            timeout=30,
        )
        if content_type is None:  # httpx adds none for raw content: the request had none
            assert "content-type" not in response.request.headers
        assert response.status_code == 415, response.text
        assert response.json()["error"]["type"] == "unsupported_media_type"
        assert stub.most == 0  # refused before the app saw it
        ok = httpx.post(
            f"http://127.0.0.1:{port}/v1/search",
            content=b'{"q": 1}',
            headers={"Content-Type": "application/json; charset=utf-8"},
            timeout=30,
        )
        assert ok.status_code == 200


class PagesStub(Stub):
    """The stub with a web interface beside it: ``POST /signin`` reads its form, ``GET /search``
    (a page) waits like ``POST /v1/search``."""

    def app(self) -> Starlette:
        api = super().app()

        async def signin(request: Request) -> Response:
            form = await request.form()
            return JSONResponse({"token": str(form.get("token"))})

        async def page(request: Request) -> Response:
            with self.lock:
                self.in_flight += 1
            try:
                await anyio.to_thread.run_sync(lambda: self.gate.wait(60))
            finally:
                with self.lock:
                    self.in_flight -= 1
            return Response("<p>results</p>", media_type="text/html")

        return Starlette(
            routes=[
                *api.routes,
                Route("/signin", signin, methods=["POST"]),
                Route("/search", page, methods=["GET"]),
            ]
        )


def pages_guard(stub: Stub, **options: Any) -> Guard:
    return guard(stub, pages=Pages(wants_page, error_page, FORM_PATHS), **options)


def _html(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html"), response.text
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert words in response.text and not response.text.startswith("{")


def test_forms_pass_only_to_sign_in_and_out_and_browsers_get_pages() -> None:
    stub = PagesStub(hold=0.001)
    with uvicorn_thread(pages_guard(stub, token="s3cret")) as port:
        base = f"http://127.0.0.1:{port}"
        signin = httpx.post(f"{base}/signin", data={"token": "s3cret"}, timeout=30)
        assert signin.status_code == 200 and signin.json() == {"token": "s3cret"}
        # a form anywhere else, or another body type on sign-in: 415 before any route
        refused = [
            httpx.post(f"{base}/search", data={"q": "x"}, timeout=30),
            httpx.post(f"{base}/signin", files={"token": ("t", b"s3cret")}, timeout=30),
            httpx.post(f"{base}/signout", content=b"csrf=x", timeout=30),
        ]
        for response in refused:
            _html(response, 415, "must be JSON")
        api = httpx.post(
            f"{base}/v1/search",
            data={"q": "x"},
            headers={"Authorization": "Bearer s3cret"},
            timeout=30,
        )
        assert api.status_code == 415 and api.json()["error"]["type"] == "unsupported_media_type"
        # another site's name in Host: a page for the browser, JSON for the API
        _html(httpx.get(f"{base}/search", headers={"Host": "evil.example"}), 421, "Host header")
        misdirected = httpx.post(
            f"{base}/v1/search", json={"q": 1}, headers={"Host": "evil.example"}, timeout=30
        )
        assert misdirected.json()["error"]["type"] == "misdirected_request"


def test_a_busy_or_slow_browser_request_gets_a_page_the_api_json() -> None:
    held = PagesStub()
    app = pages_guard(held, concurrency=1, queue_size=0, queue_timeout=1.0, body_timeout=1.0)
    with uvicorn_thread(app) as port, ThreadPoolExecutor(max_workers=2) as pool:
        base = f"http://127.0.0.1:{port}"
        first = pool.submit(httpx.get, f"{base}/search", timeout=60)
        wait_until(lambda: held.in_flight == 1, "the first page is being served", 30, 0.05)
        busy = httpx.get(f"{base}/search", headers={"Accept": "text/html"}, timeout=30)
        _html(busy, 503, "the server is busy")
        assert busy.headers["retry-after"]
        over = post(port)
        assert over.status_code == 503 and over.json()["error"]["type"] == "unavailable"
        body = b"token=s3cret&csrf=x"
        head = (
            f"POST /signin HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with contextlib.closing(raw(port, head + body[:3])) as slow:
            status, headers, answer = read_response(slow)
        assert status == 408 and headers["content-type"].startswith("text/html"), answer
        assert b"did not arrive within 1 s" in answer
        held.gate.set()
        assert first.result(timeout=60).status_code == 200


MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def test_mcp_over_http_has_the_limits_of_pgkb_serve(coll_kb: CollKb, tmp_path: Path) -> None:
    """``pgkb mcp --http`` as a process: 600 connections that send half a request head, a
    body over the limit. Before, it ran the SDK's plain uvicorn: the heads stayed open for as
    long as their clients kept them (4,000 of them for 40 s and more), whatever the body."""
    served = Served(["--http"], coll_kb.env(coll_kb.role_url(coll_kb.reader)), tmp_path,
                    command="mcp")  # fmt: skip
    port = int(served.url.rsplit(":", 1)[1])
    half = []
    try:
        for _ in range(600):
            half.append(raw(port, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
        started = served.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS, timeout=30)
        assert started.status_code == 200, started.text[:500]
        assert started.headers.get("mcp-session-id")
        # past the header deadline (10 s) each is closed; past 512 open, the idlest already
        wait_until(lambda: all(closed_by_server(s) for s in half), "half heads closed", 45, 0.2)
        large = served.post(
            "/mcp", content=b"{" + b" " * 2_000_000 + b"}",
            headers={**MCP_HEADERS, "Content-Type": "application/json"},
        )  # fmt: skip
        assert large.status_code == 413
        assert large.json()["error"]["type"] == "request_too_large"
        elsewhere = served.post("/mcp", json=MCP_INIT, headers={**MCP_HEADERS,
                                "Host": "attacker.example"})  # fmt: skip
        assert elsewhere.status_code == 421
    finally:
        for sock in half:
            sock.close()
        served.stop()
    assert "Traceback" not in served.output()
