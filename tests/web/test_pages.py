"""The web interface over plain HTTP (no browser): every page, escaping and the CSP, signing in
with the token (cookie attributes, CSRF, the token never in a page or an address), a role
scoped to one collection, and the streamed answer's events."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import httpx
import pytest

from tests.fake_openai import Reply, chat_reply
from tests.processes import wait_until
from tests.web.conftest import HOSTILE_TITLE, TOKEN, WebKb

pytestmark = pytest.mark.model


def signed_in(base: str) -> httpx.Client:
    """A client holding a session cookie got through the sign-in form."""
    client = httpx.Client(base_url=base, follow_redirects=False, timeout=60)
    form = client.get("/signin")
    assert form.status_code == 200, form.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    done = client.post("/signin", data={"token": TOKEN, "csrf": csrf.group(1), "next": "/"})
    assert done.status_code == 303 and done.headers["location"] == "/", done.text
    return client


@pytest.fixture(scope="module")
def client(web_server: str) -> Any:
    c = signed_in(web_server)
    try:
        yield c
    finally:
        c.close()


def _ok(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text[:2000]
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "default-src 'none'" in csp
    # the only script is our own file: no inline script, no other site
    assert re.findall(r"<script[^>]*>", response.text) == ['<script src="/static/app.js" defer>']
    assert TOKEN not in response.text
    return response.text


def test_the_documents_list(client: httpx.Client, web_kb: WebKb) -> None:
    html = _ok(client.get("/"))
    for title in ("Home office equipment budget", "Parental leave", "CREATE INDEX"):
        assert title in html
    assert "6 documents" in html  # broken.pdf failed: not in the list
    # the relation count, the failed source of the last run
    assert re.search(r'relations" href="/graph\?doc=' + web_kb.ids["leave.md"], html)
    assert "failed" in html and "broken.pdf" in html
    # filters: collection, category, type, words; sort
    scoped = _ok(client.get("/", params={"collection": "engineering"}))
    assert "CREATE INDEX" in scoped and "Parental leave" not in scoped and "2 documents" in scoped
    hr = _ok(client.get("/", params={"category": "hr", "q": "leave"}))
    assert "Parental leave" in hr and "1 document" in hr and "Business travel" not in hr
    none = _ok(client.get("/", params={"type": "policy", "q": "zzz-nothing"}))
    assert "No document matches these filters" in none
    newest = _ok(client.get("/", params={"sort": "updated"}))
    assert "newest first" in newest
    bad = client.get("/", params={"sort": "size"})
    assert bad.status_code == 400 and "sort must be one of title, updated" in bad.text
    past = client.get("/", params={"page": "9"})
    assert past.status_code == 200 and "There is no page 9" in past.text


def test_a_document_with_outline_text_and_relations(client: httpx.Client, web_kb: WebKb) -> None:
    leave = web_kb.ids["leave.md"]
    html = _ok(client.get(f"/documents/{leave}"))
    assert "sixteen weeks of paid parental leave" in html
    assert "This document references" in html and "Home office equipment budget" in html
    assert f"/graph?doc={leave}" in html
    equipment = web_kb.ids["equipment.md"]
    html = _ok(client.get(f"/documents/{equipment}"))
    assert "References this document" in html and "Parental leave" in html
    # the outline's entries open their chunk range
    link = re.search(rf'href="(/documents/{equipment}\?start=\d+&amp;end=\d+#chunk-\d+)"', html)
    assert link is not None, html
    ranged = _ok(client.get(link.group(1).replace("&amp;", "&")))
    assert 'id="chunk-' in ranged
    # a chunk range past the end, a bad range, an unknown document
    assert "No text in this range" in _ok(client.get(f"/documents/{equipment}?start=999"))
    assert client.get(f"/documents/{equipment}?start=3&end=1").status_code == 400
    assert client.get("/documents/not-a-uuid").status_code == 404
    missing = client.get("/documents/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and "No such document" in missing.text


def test_the_graph(client: httpx.Client, web_kb: WebKb) -> None:
    leave = web_kb.ids["leave.md"]
    html = _ok(client.get("/graph", params={"doc": leave, "depth": 2}))
    assert "<svg" in html and 'class="node start major"' in html
    assert f'href="/documents/{web_kb.ids["equipment.md"]}"' in html
    assert "references" in html  # the legend
    catalogue = _ok(client.get("/graph"))
    assert len(re.findall(r'class="node[ "]', catalogue)) == 6
    assert client.get("/graph", params={"depth": 4, "doc": leave}).status_code == 400
    assert client.get("/graph", params={"type": "likes"}).status_code == 400


def test_search_highlights_and_explains(client: httpx.Client, web_kb: WebKb) -> None:
    html = _ok(client.get("/search", params={"q": "furniture budget for the home workspace"}))
    assert "<mark>furniture</mark>" in html
    assert "Why this result" in html and "vector #" in html and "keyword #" in html
    chunk = re.search(
        rf'href="/documents/{web_kb.ids["equipment.md"]}\?chunk=(\d+)#chunk-\1"', html
    )
    assert chunk is not None
    keyword = _ok(client.get("/search", params={"q": "fillfactor", "mode": "keyword"}))
    assert "CREATE INDEX" in keyword and "not among the vector" not in keyword
    scoped = _ok(client.get("/search", params={"q": "index", "collection": "handbook"}))
    assert "CREATE INDEX" not in scoped
    bad = client.get("/search", params={"q": "x", "meta": "nokey"})
    assert bad.status_code == 400 and "is not key=value" in bad.text


def test_ask_without_a_script_gives_the_cited_answer(client: httpx.Client, web_kb: WebKb) -> None:
    web_kb.fake.script(
        "/v1/chat/completions",
        chat_reply("Up to 600 EUR for a desk and a chair [Home office equipment budget]."),
    )
    html = _ok(
        client.get("/ask", params={"q": "Who covers the cost of furniture for my home workspace?"})
    )
    equipment = web_kb.ids["equipment.md"]
    assert re.search(rf'<a class="citation" href="/documents/{equipment}\?chunk=0#chunk-0">', html)
    assert "Up to 600 EUR" in html
    idk = _ok(client.get("/ask", params={"q": "What does the Zorblax policy say about hotels?"}))
    assert "I don&#39;t know" in idk and "The closest passages" in idk


def test_ask_streams_the_model_s_text_then_the_checked_answer(
    client: httpx.Client, web_kb: WebKb
) -> None:
    reply = chat_reply(
        "Every employee may spend up to 600 EUR on home office furniture "
        "[Home office equipment budget]."
    )
    web_kb.fake.script("/v1/chat/completions", Reply(reply.body, trickle=0.3))
    events: list[tuple[str, Any, float]] = []
    question = "Who covers the cost of furniture for my home workspace?"
    with client.stream("GET", "/ask/stream", params={"q": question}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind:
                events.append((kind, json.loads(line[6:]), time.monotonic()))
    kinds = [k for k, _, _ in events]
    assert kinds[-1] == "done" and kinds.count("text") >= 5, kinds
    text = "".join(d for k, d, _ in events if k == "text")
    assert text.startswith("Every employee may spend up to 600 EUR")
    # pieces arrived as the model wrote them (0.3 s apart), not all at the end
    first = next(t for k, _, t in events if k == "text")
    assert events[-1][2] - first > 1.0
    done = events[-1][1]
    assert 'class="citation"' in done and web_kb.ids["equipment.md"] in done
    request = web_kb.fake.requests_to("/v1/chat/completions")[-1]
    assert request.body["stream"] is True


def test_a_client_that_leaves_the_stream_stops_its_answer(
    client: httpx.Client, web_kb: WebKb
) -> None:
    """The answer's work stops at the model's next piece once its client went away: a page
    closed mid-answer holds no model call, thread or database connection past the concurrency
    limit (before, the work ran to its end, about a minute here, after its slot was freed)."""
    words = "Every employee may spend up to 600 EUR on home office furniture. " * 25
    reply = chat_reply(words + "[Home office equipment budget]")  # 1,600+ characters: 200 pieces
    web_kb.fake.script("/v1/chat/completions", Reply(reply.body, trickle=0.3))

    def answering() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "pgkb-web-ask" and t.is_alive()]

    question = "Who covers the cost of furniture for my home workspace?"
    with client.stream("GET", "/ask/stream", params={"q": question}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("event: text"):
                break  # the model is writing: leave
        assert answering(), "the answer's work runs"
    wait_until(lambda: not answering(), "the answer's work stopped after its client left", 20)


def test_status(client: httpx.Client) -> None:
    html = _ok(client.get("/status"))
    assert '<span class="n">6</span> documents' in html
    assert "handbook" in html and "engineering" in html
    assert "fake-chat" in html and "all-MiniLM-L6-v2" in html
    assert "broken.pdf" in html  # the run log's failures
    assert "Health checks" in html


def test_hostile_text_is_escaped_everywhere(client: httpx.Client, web_kb: WebKb) -> None:
    hostile = web_kb.ids["hostile.html"]
    escaped = "&lt;script&gt;window.__pwned = &#34;title&#34;&lt;/script&gt;"
    pages = [
        client.get("/"),
        client.get(f"/documents/{hostile}"),
        client.get("/graph"),
        client.get("/search", params={"q": "hostile furniture script", "mode": "keyword"}),
    ]
    for page in pages:
        html = _ok(page)
        assert "<script>window" not in html and "<img src=x" not in html
        assert "<iframe" not in html and "<svg onload" not in html
    assert escaped in pages[0].text or escaped.replace("&#34;", "&quot;") in pages[0].text
    assert "&lt;iframe" in pages[1].text
    assert HOSTILE_TITLE not in pages[2].text


def test_the_token_signs_in_once(web_server: str) -> None:
    with httpx.Client(base_url=web_server, follow_redirects=False, timeout=60) as anonymous:
        _sign_in_and_out(anonymous)


def _sign_in_and_out(anonymous: httpx.Client) -> None:
    page = anonymous.get("/search?q=x")
    assert page.status_code == 303 and page.headers["location"] == "/signin?next=%2Fsearch%3Fq%3Dx"
    assert anonymous.post("/v1/search", json={"query": "x"}).status_code == 401  # API: bearer
    assert anonymous.get("/static/app.css").status_code == 200  # no secret in the stylesheet
    form = anonymous.get("/signin?next=/status")
    csrf_cookie = form.cookies.get("pgkb_csrf")
    assert csrf_cookie and "httponly" in form.headers["set-cookie"].lower()
    assert "samesite=strict" in form.headers["set-cookie"].lower()
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    # a wrong token, a missing or wrong CSRF value, another site's form: refused
    wrong = anonymous.post("/signin", data={"token": "nope", "csrf": csrf.group(1)})
    assert wrong.status_code == 401 and "not this server" in wrong.text
    assert "pgkb_session" not in wrong.headers.get("set-cookie", "")
    assert anonymous.post("/signin", data={"token": TOKEN}).status_code == 403
    assert anonymous.post("/signin", data={"token": TOKEN, "csrf": "forged"}).status_code == 403
    other_site = anonymous.post(
        "/signin", data={"token": TOKEN, "csrf": csrf.group(1)},
        headers={"Origin": "https://evil.example"},
    )  # fmt: skip
    assert other_site.status_code == 403
    good = anonymous.post(
        "/signin", data={"token": TOKEN, "csrf": csrf.group(1), "next": "//evil.example/x"}
    )
    assert good.status_code == 303 and good.headers["location"] == "/"  # never another site
    cookie = good.headers["set-cookie"]
    assert cookie.startswith("pgkb_session=") and TOKEN not in cookie
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    status = anonymous.get("/status")
    assert status.status_code == 200 and "Sign out" in status.text
    # the guard lets a form through to sign-in and sign-out only: elsewhere 415, a page for
    # the web interface and JSON for the API
    form_elsewhere = anonymous.post("/ask", data={"q": "x"})
    assert form_elsewhere.status_code == 415
    assert form_elsewhere.headers["content-type"].startswith("text/html")
    api_form = anonymous.post(
        "/v1/search", data={"query": "x"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert api_form.status_code == 415
    assert api_form.json()["error"]["type"] == "unsupported_media_type"
    # sign out needs the page's CSRF value
    assert anonymous.post("/signout", data={"csrf": "x"}).status_code == 403
    value = re.search(r'name="csrf" value="([^"]+)"', status.text)
    assert value is not None
    out = anonymous.post("/signout", data={"csrf": value.group(1)})
    assert out.status_code == 303 and 'pgkb_session=""' in out.headers["set-cookie"]
    anonymous.cookies.clear()
    assert anonymous.get("/status").status_code == 303
    # a forged or expired cookie is no session
    anonymous.cookies.set("pgkb_session", "9999999999.abc.def")
    assert anonymous.get("/").status_code == 303


def test_a_scoped_role_sees_nothing_of_another_collection(
    scoped_server: str, web_kb: WebKb
) -> None:
    with httpx.Client(base_url=scoped_server, follow_redirects=False, timeout=60) as client:
        _scoped(client, web_kb)


def test_the_owner_serving_one_collection_shows_no_other(web_kb: WebKb) -> None:
    """``pgkb serve --collection handbook`` run as a role that reads every collection (the
    owner): its pages show handbook only. The status page listed every collection the role may
    read, with its documents and chunks (the word-presence oracle saw engineering's counts
    change with its content)."""
    from tests.web.conftest import _serve

    served = _serve(web_kb.settings.replace(collections="handbook"), None)
    base = next(served)
    try:
        client = httpx.Client(base_url=base, timeout=60)
        status = _ok(client.get("/status"))
        assert "handbook" in status and "engineering" not in status, status
        _scoped(client, web_kb)
        client.close()
    finally:
        served.close()


def _scoped(client: httpx.Client, web_kb: WebKb) -> None:
    listing = _ok(client.get("/"))
    assert "Parental leave" in listing and "CREATE INDEX" not in listing
    assert "engineering" not in listing
    engineering = web_kb.ids["createindex.md"]
    assert client.get(f"/documents/{engineering}").status_code == 404
    assert client.get("/graph", params={"doc": engineering}).status_code == 404
    graph = _ok(client.get("/graph"))
    assert "CREATE INDEX" not in graph and "Routine vacuuming" not in graph
    search = _ok(
        client.get("/search", params={"q": "CREATE INDEX CONCURRENTLY", "mode": "keyword"})
    )
    assert "0 results" in search and "hit-item" not in search and "builds an index" not in search
    refused = client.get("/search", params={"q": "index", "collection": "engineering"})
    assert refused.status_code == 400 and "Routine" not in refused.text
    status = _ok(client.get("/status"))
    assert "engineering" not in status
    assert "broken.pdf" not in status  # the run log names every collection's paths


def _error_page(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert words in response.text, response.text[:2000]
    assert "Traceback" not in response.text and 'File "' not in response.text


def test_bad_addresses_and_failures_are_pages_never_tracebacks(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    for path, status, words in [
        ("/?page=abc", 400, "page must be a whole number, got &#39;abc&#39;"),
        ("/?type=poem", 400, "type must be one of policy"),
        ("/?sort=size", 400, "sort must be one of title, updated"),
        ("/documents/not-an-id", 404, "is not a document id"),
        (f"/documents/{missing}", 404, f"no document {missing} here"),
        (f"/documents/{missing}?start=5&end=2", 400, "end (2) is before start (5)"),
        ("/graph?depth=9", 400, "depth must be from 1 to 3, got 9"),
        ("/graph?type=likes", 400, "unknown relation type &#39;likes&#39;"),
        ("/search?q=x&mode=fuzzy", 400, "mode must be one of hybrid, vector, keyword"),
        ("/search?q=x&min_similarity=high", 400, "minimum similarity must be a number"),
        ("/search?q=x&meta=team", 400, "metadata filter &#39;team&#39; is not key=value"),
        ("/no/such/page", 404, "nothing at /no/such/page"),
    ]:
        _error_page(client.get(path, headers={"accept": "text/html"}), status, words)
    # a method no page takes (a JSON body: the guard refuses any other with 415 first)
    _error_page(
        client.post("/status", json={}, headers={"accept": "text/html"}), 405, "Not allowed"
    )
    _error_page(client.post("/status", headers={"accept": "text/html"}), 415, "must be JSON")
    # the JSON API keeps answering JSON
    api = client.get("/v1/nothing", headers={"accept": "application/json"})
    assert api.status_code in (401, 404) and api.headers["content-type"] == "application/json"

    # a failure nobody foresaw: the page says so, the log has the details
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret detail of the failure")

    monkeypatch.setattr("loader.web.reads.ingest_activity", broken)
    failed = client.get("/status")
    _error_page(failed, 500, "internal error; the server log has the details")
    assert "secret detail" not in failed.text
