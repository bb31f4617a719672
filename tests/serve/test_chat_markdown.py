"""Chat-completions answers rendered as a chat UI renders them (CommonMark, markdown-it-py):
nothing in one loads or runs, whatever a page's title or the model writes. Run as the attack
ran: a document whose title plants a link and a tracking image, ingested, then asked through
``POST /v1/chat/completions`` of ``pgkb serve`` (a real uvicorn server on 127.0.0.1), without
a chat model and with the fake one writing images and ``javascript:`` links; plain and
streamed."""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from loader.settings import Settings
from tests.fake_openai import FakeOpenAI, chat_reply
from tests.helpers import create_database, drop_database
from tests.serve_fixtures import running

pytestmark = pytest.mark.model

PLANTED = "Leave](https://evil.example/login) ![pixel](https://evil.example/t.png) [policy"
"""A title that closes its citation's bracket, then opens a link and an image."""
DOCS = {
    "leave.md": "# Parental leave\n\nParents receive sixteen weeks of paid parental leave. "
    "Tell your manager eight weeks before the leave starts.\n",
    "planted.md": f"# {PLANTED}\n\nParental leave lasts sixteen weeks; parents tell their "
    "manager eight weeks before the parental leave starts.\n",
}
QUESTION = "How many weeks of parental leave do parents receive?"


@pytest.fixture(scope="module")
def planted_kb(
    pg_url: str, template_db: str, embedder: Any, tmp_path_factory: Any
) -> Iterator[Settings]:
    from loader.ingest.pipeline import ingest_paths

    root: Path = tmp_path_factory.mktemp("planted-docs")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    dbname = f"pgkb_md_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_url, dbname, template=template_db)
    try:
        settings = Settings(database_url=url, data_dir=tmp_path_factory.mktemp("planted-kb"))
        report = ingest_paths(settings.replace(source_root=root), [root], embedder=embedder)
        assert report.exit_code == 0, report.to_dict()
        with psycopg.connect(url) as conn:
            titles = {row[0] for row in conn.execute("SELECT title FROM kb.documents")}
        assert PLANTED in titles, titles  # the title is stored as the page wrote it
        yield settings
    finally:
        drop_database(pg_url, dbname)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


def _serve(settings: Settings) -> Any:
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    return create_app(KnowledgeService(settings, pool_size=2).open())


def _ask(url: str, stream: bool) -> str:
    body = {"model": "pgkb", "messages": [{"role": "user", "content": QUESTION}]}
    if not stream:
        response = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        content: str = response.json()["choices"][0]["message"]["content"]
        return content
    pieces = []
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                import json

                event = json.loads(line[6:])
                for choice in event.get("choices", []):
                    pieces.append(choice["delta"].get("content") or "")
    return "".join(pieces)


def _live(markdown: str) -> list[str]:
    """What a chat UI rendering ``markdown`` would load or follow: images, tags that load, and
    links to evil.example or to anything but http(s)."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").render(markdown)
    found = re.findall(r"<(?:img|iframe|script)\b[^>]*>", html)
    for href in re.findall(r'href="([^"]*)"', html):
        if "evil.example" in href or not href.startswith(("http://", "https://")):
            found.append(href)
    return found


def test_titles_and_model_markdown_load_and_run_nothing(
    planted_kb: Settings, fake: FakeOpenAI
) -> None:
    # without a chat model: the extractive answer names each passage's title (no model needed)
    with running(_serve(planted_kb)) as url:
        for stream in (False, True):
            content = _ask(url, stream)
            assert "sixteen weeks" in content
            assert _live(content) == [], (stream, content)

    # the chat model's reply: cites the planted page by its path, shows an image, a
    # javascript: link, a tag and a reference definition; cites the other page by its title
    reply = (
        "Parents receive sixteen weeks [Parental leave] [planted.md]. "
        "![pixel](https://evil.example/reply.png) See [the form](javascript:alert(document.cookie))"
        ' and <img src="https://evil.example/tag.png"> or [ref link][r].\n\n'
        "[r]: javascript:alert(2)\n"
    )
    settings = dataclasses.replace(
        planted_kb, chat_model="fake-chat", chat_base_url=fake.base_url, chat_api_key="sk-test"
    )
    with running(_serve(settings)) as url:
        for stream in (False, True):
            fake.script("/v1/chat/completions", chat_reply(reply))
            content = _ask(url, stream)
            assert "sixteen weeks" in content and "the form" in content
            assert "Sources:" in content  # the footer names both cited pages
            assert _live(content) == [], (stream, content)
