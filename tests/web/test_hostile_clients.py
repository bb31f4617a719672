"""The web interface's sign-in, sessions and costly pages under hostile clients, run as the
attacks ran: the real ``pgkb serve`` (``create_app`` in the configuration it runs) on
127.0.0.1, raw sockets and plain HTTP clients that send what a browser sends."""

from __future__ import annotations

import contextlib
import html
import re
import socket
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fake_openai import chat_reply
from tests.web.conftest import TOKEN, WebKb, _serve

pytestmark = pytest.mark.model


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _read_status(sock: socket.socket, seconds: float) -> tuple[int, dict[str, str]]:
    """The status and headers of the one response the server sends on ``sock``."""
    sock.settimeout(seconds)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"closed without a response: {data!r}"
        data += piece
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
    return int(head[0].split()[1]), headers


def test_wrong_token_sign_ins_hold_no_slot_the_api_needs(web_server: str) -> None:
    """300 sign-ins with a wrong token at once (each waits out its half-second penalty), then
    the API's calls with the right bearer token: before the fix the sign-ins held the 8 slots
    and filled the queue, so the calls got 503s or waited their turn (300 x 0.5 s / 8 = 19 s)."""
    port = _port(web_server)
    body = b"token=wrong-token&csrf=abc&next=%2F"
    head = (
        "POST /signin HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: pgkb_csrf=abc\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sockets: list[socket.socket] = []
    try:
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(head + body)
            sockets.append(sock)
        api: list[Any] = []
        with httpx.Client(
            base_url=web_server,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=httpx.Timeout(8.0),  # the sign-ins alone would take 19 s to drain
        ) as client:
            for _ in range(3):
                try:
                    response = client.post("/v1/search", json={"query": "parental leave"})
                    api.append(response.status_code)
                except httpx.TimeoutException:
                    api.append("no answer within 8 s")
        statuses = [_read_status(sock, 60) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert api == [200, 200, 200]
    counted = {code: sum(1 for s, _ in statuses if s == code) for code, _ in statuses}
    assert set(counted) <= {401, 429}, counted  # a wrong token, or too many sign-ins at once
    assert counted.get(401, 0) >= 16  # the penalised ones were answered, not dropped
    assert all(h.get("retry-after") == "1" for s, h in statuses if s == 429)


BROWSER = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0 Safari/537.36",
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
}


def _sign_in(base: str) -> httpx.Client:
    """A browser-like client holding a session cookie got through the sign-in form."""
    client = httpx.Client(base_url=base, follow_redirects=False, timeout=60, headers=BROWSER)
    form = client.get("/signin", headers={"Sec-Fetch-Site": "none"})
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    done = client.post(
        "/signin",
        data={"token": TOKEN, "csrf": csrf.group(1), "next": "/"},
        headers={"Origin": base, "Sec-Fetch-Site": "same-origin"},
    )
    assert done.status_code == 303, done.text
    return client


def test_sign_out_ends_the_session_on_the_server(web_server: str) -> None:
    """The cookie a browser held before signing out, replayed afterwards (a copy kept by
    anyone who saw it): before the fix it opened every page for the rest of its 12 hours."""
    with contextlib.closing(_sign_in(web_server)) as browser:
        status = browser.get("/status", headers={"Sec-Fetch-Site": "same-origin"})
        assert status.status_code == 200 and "Sign out" in status.text
        old = browser.cookies.get("pgkb_session")
        assert old
        csrf = re.search(r'name="csrf" value="([^"]+)"', status.text)
        assert csrf is not None
        out = browser.post(
            "/signout",
            data={"csrf": csrf.group(1)},
            headers={"Origin": web_server, "Sec-Fetch-Site": "same-origin"},
        )
        assert out.status_code == 303 and out.headers["location"] == "/signin"
    with (
        contextlib.closing(_sign_in(web_server)) as other,  # another browser's session
        httpx.Client(
            base_url=web_server, follow_redirects=False, timeout=60, headers=BROWSER
        ) as replay,
    ):
        replay.cookies.set("pgkb_session", old)
        for path in ("/", "/status", "/search?q=leave", f"/ask?q={urllib.parse.quote('leave')}"):
            page = replay.get(path, headers={"Sec-Fetch-Site": "same-origin"})
            assert page.status_code == 303, (path, page.status_code)
            assert page.headers["location"].startswith("/signin?next=")
        stream = replay.get("/ask/stream?q=leave", headers={"Accept": "text/event-stream"})
        assert stream.status_code == 401
        assert other.get("/status").status_code == 200


@pytest.fixture(scope="module")
def open_server(web_kb: WebKb) -> Iterator[str]:
    """``pgkb serve`` without a token (a machine's own server), with the chat model."""
    settings = web_kb.reader_settings(
        chat_base_url=web_kb.fake.base_url,
        chat_model="fake-chat",
        chat_api_key="sk-test",
        chat_max_retries=0,
        chat_timeout=20.0,
    )
    yield from _serve(settings, None)


CROSS_SITE = {  # what a browser sends when a page of another site makes it load an address
    "navigation": {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
                   "Sec-Fetch-Dest": "document", "Referer": "https://evil.example/"},
    "image": {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
              "Sec-Fetch-Dest": "image", "Referer": "https://evil.example/"},
    "another port": {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors",
                     "Sec-Fetch-Dest": "image", "Referer": "http://127.0.0.1:3000/"},
    "fetch": {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
              "Sec-Fetch-Dest": "empty", "Origin": "https://evil.example"},
    "no fetch metadata": {"Referer": "https://evil.example/page"},
}  # fmt: skip


def test_another_site_cannot_make_a_browser_ask_or_recheck(open_server: str, web_kb: WebKb) -> None:
    """Without a token, a page of another site made its visitors' browsers run ``GET
    /ask?q=...`` (a chat-model call each) and ``GET /status?recheck=1`` (the doctor's checks):
    the JSON API refuses cross-site requests, these pages did not."""
    fake = web_kb.fake
    question = "How long is parental leave?"
    ask = f"/ask?q={urllib.parse.quote(question)}"
    with httpx.Client(
        base_url=open_server, follow_redirects=False, timeout=60, headers=BROWSER
    ) as browser:
        before = len(fake.requests_to("/v1/chat/completions"))
        for kind, headers in CROSS_SITE.items():
            for path in (ask, "/ask/stream?q=leave", "/status?recheck=1", "/search?q=leave"):
                page = browser.get(path, headers=headers)
                assert page.status_code == 403, (kind, path, page.status_code)
                if path == ask:  # a clear page: what was refused, and the way to do it here
                    assert "another site" in page.text
                    assert question in page.text and f'href="{html.escape(ask)}"' in page.text
        assert len(fake.requests_to("/v1/chat/completions")) == before  # the model never ran
        # this server's own pages, and an address typed or bookmarked, still work
        for headers in ({"Sec-Fetch-Site": "same-origin", "Referer": open_server + "/ask"},
                        {"Sec-Fetch-Site": "none"}, {}):  # fmt: skip
            fake.script("/v1/chat/completions", chat_reply("Sixteen weeks [Parental leave]."))
            page = browser.get(ask, headers=headers)
            assert page.status_code == 200 and "Sixteen weeks" in page.text, headers
            assert browser.get("/status?recheck=1", headers=headers).status_code == 200
        # a cross-site link to a page that costs nothing still opens it
        assert browser.get("/", headers=CROSS_SITE["navigation"]).status_code == 200
        assert browser.get("/ask", headers=CROSS_SITE["navigation"]).status_code == 200
