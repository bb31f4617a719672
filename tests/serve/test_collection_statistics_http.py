"""The word-presence oracle through the servers and `pgkb ask`: a reader of ``hr`` (and the owner
narrowed with ``--collection hr``) must get the same answers whether ``eng`` holds a word, holds
another in its place, or holds nothing.

``hr`` is ingested with the real local model; ``eng`` is rewritten between the states in SQL
(its vectors from the same model), so nothing else stored changes (the abstention gate's
similarity profile, one per database, is measured once). Through ``/v1/search`` (hybrid and
keyword), ``/v1/ask`` and ``pgkb ask --collection hr``: identical bodies in every state, and a
question about a word only ``eng`` holds ("zanzibarite", no English word) is answered "I don't
know" in every state, where before the owner's gate counted the word in every collection and
answered from unrelated ``hr`` passages.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.settings import Settings
from tests.helpers import create_database, drop_database
from tests.serve_fixtures import _create_role, _drop_role, role_url

pytestmark = pytest.mark.model

TOKEN = "oracle-token"
HR_DOCS = {
    "acquisitions.md": "# Acquisitions\n\nAfter an acquisition the leave policy of the buyer "
    "applies to every employee. The people team explains the acquisition policy on request.\n",
    "leave.md": "# Parental leave\n\nParents receive sixteen weeks of paid parental leave. Tell "
    "your manager eight weeks before the leave starts.\n",
    "travel.md": "# Business travel\n\nBook trains for journeys under four hours; hotels up to "
    "150 EUR a night are reimbursed.\n",
}
ENG = [
    "The acquisition of locks by CREATE INDEX follows the policy for index builds.",
    "Deploy the service after the acquisition review; zanzibarite rows go at night.",
    "Vacuum the tables of the acquisition project; zanzibarite tuples free the space.",
]
STATES = ["holds", "lacks", "empty"]
QUESTIONS = ["What does the acquisition policy say?", "What does the zanzibarite policy require?"]


def _eng_texts(state: str) -> list[str]:
    if state == "holds":
        return ENG
    if state == "lacks":  # same count and lengths, other words in place of the probed ones
        return [t.replace("acquisition", "xylographer").replace("zanzibarite", "quartzitic")
                for t in ENG]  # fmt: skip
    return []


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Kb:
    def __init__(self, settings: Settings, reader_url: str, embedder: Any) -> None:
        self.settings = settings
        self.reader_url = reader_url
        self.embedder = embedder

    def set_state(self, state: str) -> None:
        texts = _eng_texts(state)
        vectors = self.embedder.embed(texts) if texts else []
        with psycopg.connect(str(self.settings.database_url)) as conn:
            conn.execute("DELETE FROM kb.documents WHERE collection = 'eng'")
            for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                doc = str(uuid.uuid4())
                conn.execute(
                    "INSERT INTO kb.documents (id, source_uri, title, content_sha, collection) "
                    "VALUES (%s, %s, %s, %s, 'eng')",
                    (doc, f"eng/{i}.md", f"Engineering {i}", _sha(text)),
                )  # fmt: skip
                row = conn.execute(
                    "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, "
                    "content_sha, token_count) VALUES (%s, 0, %s, %s, %s, 20) RETURNING id",
                    (doc, f"Engineering {i}", text, _sha(text)),
                ).fetchone()
                assert row is not None
                conn.execute(
                    "INSERT INTO kb.embeddings (chunk_id, model_id, embedding) "
                    "SELECT %s, m.id, %s::vector FROM kb.active_model() m",
                    (row[0], "[" + ",".join(map(str, vector)) + "]"),
                )
            conn.commit()


@pytest.fixture(scope="module")
def kb(pg_url: str, template_db: str, embedder: Any, tmp_path_factory: Any) -> Iterator[Kb]:
    from loader.ingest.pipeline import ingest_paths
    from loader.ops.roles import grant

    root: Path = tmp_path_factory.mktemp("oracle-hr")
    for name, text in HR_DOCS.items():
        (root / name).write_text(text)
    name = f"pgkb_oracle_http_{uuid.uuid4().hex[:8]}"
    role = f"hr_http_{uuid.uuid4().hex[:6]}"
    url = create_database(pg_url, name, template=template_db)
    settings = Settings(database_url=url, data_dir=tmp_path_factory.mktemp("oracle-kb"))
    try:
        report = ingest_paths(settings, [root], embedder=embedder, collection="hr")
        assert report.exit_code == 0, report.to_dict()
        _create_role(pg_url, role)
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO kb.collections (name) VALUES ('eng')")
            conn.commit()
            grant(conn, role, read=True, write=False, collections=["hr"])
        yield Kb(settings, role_url(url, role), embedder)
    finally:
        drop_database(pg_url, name)
        _drop_role(pg_url, role)


@pytest.fixture(scope="module")
def server(kb: Kb) -> Iterator[str]:
    import dataclasses

    import uvicorn

    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    service = KnowledgeService(
        dataclasses.replace(kb.settings, database_url=kb.reader_url), pool_size=2
    ).open()
    app = create_app(service, token=TOKEN, max_body=64_000, concurrency=4)
    instance = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = instance.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        instance.should_exit = True
        thread.join(timeout=30)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.10g}") if math.isfinite(value) else str(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _post(server: str, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(
        server + path, json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
    )
    assert response.status_code == 200, response.text
    return _plain(response.json())


def _cli(kb: Kb, *args: str) -> Any:
    env = {"PGKB_DATABASE_URL": str(kb.settings.database_url),
           "PGKB_DATA_DIR": str(kb.settings.data_dir)}  # fmt: skip
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return _plain(json.loads(result.stdout))


def _observe(kb: Kb, server: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for mode in ("hybrid", "keyword"):
        seen[f"search {mode}"] = _post(
            server, "/v1/search", {"query": "acquisition policy", "mode": mode, "limit": 10}
        )
    for question in QUESTIONS:
        seen[f"/v1/ask {question}"] = _post(server, "/v1/ask", {"question": question})
        seen[f"pgkb ask {question}"] = _cli(kb, "ask", question, "--collection", "hr", "--json")
    seen["pgkb search"] = _cli(
        kb, "search", "acquisition policy", "--mode", "keyword", "--collection", "hr", "--json"
    )
    return seen


def test_the_servers_and_ask_tell_nothing_of_a_word_in_another_collection(
    kb: Kb, server: str
) -> None:
    seen = {}
    for state in STATES:
        kb.set_state(state)
        seen[state] = _observe(kb, server)
    for key in seen["holds"]:
        values = {json.dumps(seen[s][key], sort_keys=True) for s in STATES}
        assert len(values) == 1, (key, {s: json.dumps(seen[s][key])[:400] for s in STATES})
    # the probes compared something: hr's chunks about acquisitions, scored
    hits = seen["holds"]["search keyword"]["results"]
    assert hits and "acquisition" in hits[0]["content"].lower()
    assert {h["source_uri"].rsplit("/", 1)[-1] for h in hits} == {"acquisitions.md"}
    # a word only eng holds: "I don't know", for the reader and for the owner narrowed to hr
    for state in STATES:
        assert seen[state][f"/v1/ask {QUESTIONS[1]}"]["abstained"] is True
        assert seen[state][f"pgkb ask {QUESTIONS[1]}"]["abstained"] is True


def test_the_owner_reading_everything_does_see_the_word_elsewhere(kb: Kb) -> None:
    """Without --collection the owner's gate counts eng too: the oracle can tell the states."""
    answers = {}
    for state in ("holds", "lacks"):
        kb.set_state(state)
        answers[state] = _cli(kb, "ask", QUESTIONS[1], "--json")
    assert (answers["holds"]["abstained"], answers["lacks"]["abstained"]) == (False, True)
