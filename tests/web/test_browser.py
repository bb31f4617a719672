"""The web interface in a real browser: a headless Chromium (the system's ``chromium``
package) driven by Playwright walks every page on a small ingested knowledge base.

Signs in with the token, lists and filters the documents, opens one and a range of its outline,
its graph (zooms, clicks a node), searches (highlighted terms, why each result ranked), asks
(the answer streams in, its citation opens the chunk), the status page, a hostile document
whose title and body hold HTML and script (nothing runs), a role scoped to one collection
(nothing of the other), and signs out. A JavaScript error, a console error or a failed request
fails the test.

With ``PGKB_WEB_SCREENSHOTS=DIR`` set, each page is also saved as ``DIR/<page>.png``: the
documentation's pictures are taken this way (``docs/guides/web.md`` says how).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import Reply, chat_reply
from tests.web.conftest import TOKEN, WebKb

pytestmark = pytest.mark.model

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The system's Chromium (Debian's ``chromium`` package), or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Watch:
    """Every JavaScript error, console error and failed request of a page."""

    def __init__(self, page: Any, base: str) -> None:
        self.problems: list[str] = []
        self.expected: set[str] = set()
        self.base = base
        page.on("pageerror", lambda exc: self.problems.append(f"javascript error: {exc}"))
        page.on("console", self._console)
        page.on("requestfailed", self._failed)
        page.on("response", self._response)

    def _failed(self, request: Any) -> None:
        # the page closes the answer's event stream itself once the answer is done
        if "/ask/stream?" in request.url and request.failure == "net::ERR_ABORTED":
            return
        self.problems.append(f"request failed: {request.url} {request.failure}")

    def _console(self, message: Any) -> None:
        where = (message.location or {}).get("url") or ""
        if message.type == "error" and where not in self.expected:
            self.problems.append(f"console error: {message.text} ({where})")

    def _response(self, response: Any) -> None:
        if response.status >= 400 and response.url not in self.expected:
            self.problems.append(f"{response.status} for {response.url}")
        if not response.url.startswith(self.base):
            self.problems.append(f"a request left the server: {response.url}")

    def check(self) -> None:
        assert not self.problems, "\n".join(self.problems)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip(
            "no chromium found: install Debian's chromium package (apt-get install chromium) "
            "to run the browser tests"
        )
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        # a fresh, empty profile every run (Playwright's own temporary user-data-dir)
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# read at import: the tests' own fixture clears every PGKB_ variable before a test runs
SCREENSHOTS = os.environ.get("PGKB_WEB_SCREENSHOTS")
SCREENSHOT_DIR = Path(SCREENSHOTS).resolve() if SCREENSHOTS else None


def shoot(page: Any, name: str) -> None:
    if SCREENSHOT_DIR is not None:
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT_DIR / f"{name}.png"), full_page=False)


def pwned(page: Any) -> Any:
    return page.evaluate("() => window.__pwned")


def test_every_page_in_a_browser(browser: Any, web_server: str, web_kb: WebKb) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(60_000)
    watch = Watch(page, web_server)

    # sign in: the address keeps no token, the cookie is HttpOnly and SameSite=Strict
    page.goto(web_server + "/")
    assert page.url.startswith(web_server + "/signin")
    shoot(page, "signin")
    page.fill("#token", TOKEN)
    page.click("form.signin button[type=submit]")
    page.wait_for_url(web_server + "/")
    assert TOKEN not in page.url and TOKEN not in page.content()
    (cookie,) = [c for c in context.cookies() if c["name"] == "pgkb_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("() => document.cookie") == ""  # no script can read it

    # the documents: type badges, relation counts, entities, the failed source of the last run
    assert page.locator("li.doc").count() == 6
    shoot(page, "documents")
    assert page.locator(".state.failed").inner_text().count("broken.pdf") == 1
    assert page.locator("li.doc a.badge.relations").count() >= 3
    # a filter menu applies at once (the script submits it)
    page.select_option("select[name=collection]", "engineering")
    page.wait_for_url("**collection=engineering**")
    assert page.locator("li.doc").count() == 2
    page.fill("input[name=q]", "vacuum")
    page.click("#list-filters button[type=submit]")
    page.wait_for_url("**q=vacuum**")
    assert page.locator("li.doc").count() == 1
    page.goto(web_server + "/?category=hr&sort=updated")
    assert page.locator("li.doc").count() == 4

    # a document, then a range of its outline
    page.goto(web_server + "/")
    page.click("a.doc-title:text('Home office equipment budget')")
    page.wait_for_url("**/documents/**")
    assert "600 EUR" in page.locator("section.text").inner_text()
    assert "Parental leave" in page.locator("section.relations").inner_text()
    shoot(page, "document")
    outline = page.locator(".outline a").last
    outline.click()
    page.wait_for_url("**start=**")
    assert page.locator("article.chunk").count() >= 1
    assert "Laptops" in page.locator("section.text").inner_text()

    # its graph: pan and zoom, a click opens a document
    page.click("a.button:text('Open in the graph')")
    page.wait_for_url("**/graph?doc=**")
    assert page.locator("svg.graph a.node").count() == 2
    page.select_option("select[name=depth]", "2")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**depth=2**")
    svg = page.locator("svg.graph")
    before = page.locator("g.viewport").get_attribute("transform")
    svg.hover()
    page.mouse.wheel(0, -400)
    after = page.locator("g.viewport").get_attribute("transform")
    assert after and after != before and "scale(" in after
    page.click("[data-zoom=reset]")
    page.goto(web_server + "/graph")
    assert page.locator("svg.graph a.node").count() == 6
    shoot(page, "graph")
    page.locator("svg.graph a.node.major circle").first.click()
    page.wait_for_url("**/documents/**")

    # search: highlighted terms, why each result ranked, the chunk in its document
    page.goto(web_server + "/search")
    page.fill("input[name=q]", "furniture for the home workspace")
    page.click("form.search-form button[type=submit]")
    page.wait_for_url("**/search?q=**")
    assert page.locator("ol.hits mark").count() >= 1
    assert "Why this result" in page.locator("ol.hits").inner_text()
    shoot(page, "search")
    page.locator("ol.hits a.doc-title").first.click()
    page.wait_for_url("**chunk=**")
    assert page.locator("article.chunk.hit").count() == 1

    # ask: the answer streams in, then its citation opens the chunk
    text = "Every employee may spend up to 600 EUR on furniture [Home office equipment budget]."
    web_kb.fake.script("/v1/chat/completions", Reply(chat_reply(text).body, trickle=0.25))
    page.goto(web_server + "/ask")
    page.fill("input[name=q]", "Who covers the cost of furniture for my home workspace?")
    page.click("#ask-form button[type=submit]")
    partial = page.locator(".answer.streaming .answer-text")
    partial.wait_for()
    page.wait_for_function(
        "() => { const e = document.querySelector('.answer.streaming .answer-text');"
        " return e && e.textContent.length > 0; }"
    )
    seen = partial.inner_text()
    assert seen and text.startswith(seen) and len(seen) < len(text)  # part of it, as it came
    page.locator("a.citation").wait_for()
    assert "ask?q=" in page.url
    shoot(page, "ask")
    page.click("a.citation")
    page.wait_for_url("**chunk=**")
    assert "600 EUR" in page.locator("article.chunk.hit").inner_text()

    # "I don't know" with the closest passages
    page.goto(web_server + "/ask?q=What+does+the+Zorblax+policy+say+about+hotels%3F")
    assert "I don't know" in page.locator(".answer").inner_text()

    # status
    page.goto(web_server + "/status")
    assert "Health checks" in page.content()
    assert page.locator("#runs tr.failed").count() >= 1
    shoot(page, "status")

    # the hostile document: its title and text are shown as text, nothing of them runs
    hostile = web_kb.ids["hostile.html"]
    for path in (
        "/",
        f"/documents/{hostile}",
        "/graph",
        "/search?q=hostile+furniture&mode=keyword",
    ):
        page.goto(web_server + path)
        assert pwned(page) is None, path
    page.goto(web_server + f"/documents/{hostile}")
    assert "<script>" in page.locator("h1").inner_text()  # the title, as text
    assert page.locator("main script, main iframe, main img").count() == 0

    # sign out: back to the sign-in form
    page.click("form.signout button")
    page.wait_for_url("**/signin")
    page.goto(web_server + "/status")
    assert page.url.startswith(web_server + "/signin")
    watch.check()
    context.close()


def test_a_scoped_role_sees_nothing_of_another_collection(
    browser: Any, scoped_server: str, web_kb: WebKb
) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(60_000)
    watch = Watch(page, scoped_server)
    page.goto(scoped_server + "/")
    titles = page.locator("a.doc-title").all_inner_texts()
    assert "Parental leave" in titles and "CREATE INDEX" not in titles
    options = page.locator("select[name=collection] option").all_inner_texts()
    assert not any("engineering" in o for o in options)
    missing = scoped_server + f"/documents/{web_kb.ids['createindex.md']}"
    watch.expected.add(missing)
    page.goto(missing)
    assert "No such document" in page.content()
    page.goto(scoped_server + "/graph")
    labels = page.eval_on_selector_all(
        "svg.graph a.node title", "nodes => nodes.map(n => n.textContent)"
    )
    assert labels and not any("CREATE INDEX" in t or "vacuuming" in t for t in labels)
    page.goto(scoped_server + "/search?q=CREATE+INDEX+CONCURRENTLY&mode=keyword")
    assert "CREATE INDEX" not in page.locator("main").inner_text()
    watch.check()
    context.close()
