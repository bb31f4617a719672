"""``pgkb serve`` itself, started as a process the way the services guide runs it, against a
knowledge base of two collections (``tests/processes.py``: fake embeddings, so no model loads).

Three servers: one started with ``--collection hr`` and ``--token`` (while ``PGKB_SERVE_TOKEN``
holds another token: the flag wins) as a role granted every collection; one configured by the
environment alone (``PGKB_SERVE_TOKEN``, ``PGKB_COLLECTIONS=hr,eng``); and one on 127.0.0.2
without a token (the warning), with ``--concurrency 1``, as a role granted only ``hr``.

Checked: the token from the flag and from the environment, ``/healthz`` without one and naming
the served collections; a server keeps to its collections and the ``collections`` field of
``/v1/search`` and ``/v1/ask`` narrows within them (another is a 400, and for a role granted
only hr, asking for eng is the same 400 as asking for a collection that does not exist); the
database going away is a 503 from ``/v1/search`` and ``/healthz`` and the server recovers by
itself; a request that waits longer than the queue allows (30 s) is a JSON 503; SIGTERM stops
accepting at once, lets the request in flight finish and closes the connections.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.fake_openai import FakeOpenAI, chat_reply
from tests.processes import (
    ENG_MARKERS,
    ENG_TITLES,
    HR_TITLES,
    CollKb,
    Served,
    run_pgkb,
    wait_until,
)

FLAG_TOKEN = "flag-token-1234"
ENV_TOKEN = "env-token-5678"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _titles(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {r["title"] for r in response.json()["results"]}


@pytest.fixture(scope="module")
def hr_server(coll_kb: CollKb, tmp_path_factory: Any) -> Iterator[Served]:
    """``pgkb serve --collection hr --token FLAG --timeout 2`` as the every-collection reader,
    with ``PGKB_SERVE_TOKEN`` set to another token."""
    env = coll_kb.env(coll_kb.role_url(coll_kb.reader), PGKB_SERVE_TOKEN=ENV_TOKEN)
    folder: Path = tmp_path_factory.mktemp("hr-server")
    served = Served(["--collection", "hr", "--token", FLAG_TOKEN, "--timeout", "2"], env, folder)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def env_server(coll_kb: CollKb, tmp_path_factory: Any) -> Iterator[Served]:
    """``pgkb serve`` configured by ``PGKB_SERVE_TOKEN`` and ``PGKB_COLLECTIONS`` alone."""
    env = coll_kb.env(
        coll_kb.role_url(coll_kb.reader), PGKB_SERVE_TOKEN=ENV_TOKEN, PGKB_COLLECTIONS="hr,eng"
    )
    served = Served([], env, tmp_path_factory.mktemp("env-server"))
    try:
        yield served
    finally:
        served.stop()


def test_the_token_flag_wins_over_the_environment_and_healthz_needs_none(
    hr_server: Served,
) -> None:
    search = {"query": "readme", "mode": "keyword"}
    for headers in ({}, _bearer(ENV_TOKEN), _bearer("wrong"), {"Authorization": FLAG_TOKEN}):
        refused = hr_server.post("/v1/search", json=search, headers=headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.json()["error"]["type"] == "authentication_error"
    assert _titles(hr_server.post("/v1/search", json=search, headers=_bearer(FLAG_TOKEN)))
    health = hr_server.get("/healthz")
    assert health.status_code == 200, health.text
    assert health.json()["database"] is True and health.json()["collections"] == ["hr"]
    assert "warning: serving" not in hr_server.output()  # 127.0.0.1: no warning


def test_a_server_started_with_collection_keeps_to_it(hr_server: Served) -> None:
    auth = _bearer(FLAG_TOKEN)
    readme = {"query": "readme", "mode": "keyword"}
    assert _titles(hr_server.post("/v1/search", json=readme, headers=auth)) == {"HR readme"}
    # words only eng holds, in every mode: hr's chunks (the vector leg's) or nothing
    for mode in ("hybrid", "vector", "keyword"):
        found = hr_server.post(
            "/v1/search", json={"query": "zanzibarite quokka-flux index", "mode": mode},
            headers=auth,
        )  # fmt: skip
        assert _titles(found) <= HR_TITLES, found.text
        results = json.dumps(found.json()["results"])  # the query is echoed beside them
        assert not any(marker in results for marker in ENG_MARKERS), results
    narrowed = hr_server.post("/v1/search", json={**readme, "collections": ["hr"]}, headers=auth)
    assert _titles(narrowed) == {"HR readme"}
    for path, body in (
        ("/v1/search", {**readme, "collections": ["eng"]}),
        ("/v1/ask", {"question": "What is in the readme?", "collections": ["eng"]}),
    ):
        refused = hr_server.post(path, json=body, headers=auth)
        assert refused.status_code == 400, (path, refused.text)
        message = refused.json()["error"]["message"]
        assert "this server serves collections hr; eng is not available" in message, message
    answer = hr_server.post(
        "/v1/ask", json={"question": "How many weeks of parental leave?"}, headers=auth
    )
    assert answer.status_code == 200, answer.text
    cited = {c["title"] for c in answer.json()["citations"]}
    assert cited and cited <= HR_TITLES, answer.text


def test_the_environment_alone_configures_token_and_collections(env_server: Served) -> None:
    auth = _bearer(ENV_TOKEN)
    assert env_server.post("/v1/search", json={"query": "x"}).status_code == 401
    health = env_server.get("/healthz").json()
    assert health["collections"] == ["hr", "eng"] and health["database"] is True, health
    readme = {"query": "readme", "mode": "keyword"}
    assert _titles(env_server.post("/v1/search", json=readme, headers=auth)) == {
        "HR readme", "Engineering readme",
    }  # fmt: skip
    # the collections field narrows a call within the served ones
    for asked, titles in ((["eng"], {"Engineering readme"}), (["hr"], {"HR readme"})):
        body = {**readme, "collections": asked}
        assert _titles(env_server.post("/v1/search", json=body, headers=auth)) == titles
    eng_answer = env_server.post(
        "/v1/ask", json={"question": "How do I deploy the service?", "collections": ["eng"]},
        headers=auth,
    )  # fmt: skip
    assert eng_answer.status_code == 200, eng_answer.text
    cited = {c["title"] for c in eng_answer.json()["citations"]}
    assert cited and cited <= ENG_TITLES, eng_answer.text
    outside = env_server.post(
        "/v1/search", json={**readme, "collections": ["default"]}, headers=auth
    )
    assert outside.status_code == 400
    assert "default is not available" in outside.json()["error"]["message"]


def test_a_role_granted_one_collection_over_http_a_token_warning_the_queue_and_sigterm(
    coll_kb: CollKb, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """127.0.0.2 without a token (the warning), ``--concurrency 1``, the hr reader, and a chat
    model that answers only when the test lets it: a request in flight holds the one slot."""
    env = coll_kb.env(
        coll_kb.role_url(coll_kb.hr_reader),
        PGKB_CHAT_BASE_URL=fake_openai.base_url,
        PGKB_CHAT_MODEL="fake-chat",
        PGKB_CHAT_MAX_RETRIES="0",
        PGKB_ABSTENTION="false",
    )
    served = Served(["--host", "127.0.0.2", "--concurrency", "1"], env, tmp_path)
    try:
        assert (
            "warning: serving on 127.0.0.2 without a token; set PGKB_SERVE_TOKEN" in served.output()
        ), served.output()
        assert served.url.startswith("http://127.0.0.2:")
        readme = {"query": "readme", "mode": "keyword"}
        assert _titles(served.post("/v1/search", json=readme)) == {"HR readme"}  # no token
        # the role's grant holds whatever the client asks: eng is refused with the very message
        # a collection that does not exist gets
        messages = []
        for name in ("eng", "no_such_collection"):
            refused = served.post("/v1/search", json={**readme, "collections": [name]})
            assert refused.status_code == 400, refused.text
            messages.append(refused.json()["error"]["message"].replace(name, "X"))
        assert messages[0] == messages[1] and "may read" in messages[0], messages

        release = threading.Event()
        reply = chat_reply("Parents receive sixteen weeks [Parental leave].")
        reply.hold, reply.delay = release, 120
        fake_openai.script("/v1/chat/completions", reply)
        in_flight: dict[str, httpx.Response] = {}

        def ask() -> None:
            in_flight["ask"] = served.post(
                "/v1/ask", json={"question": "How long is parental leave?"}, timeout=150
            )

        asker = threading.Thread(target=ask)
        asker.start()
        try:
            wait_until(
                lambda: fake_openai.requests_to("/v1/chat/completions"), "the ask to reach chat"
            )
            assert served.get("/healthz").status_code == 200  # not queued behind the ask
            queued = served.post("/v1/search", json=readme, timeout=120)  # waits the 30 s
            assert queued.status_code == 503, queued.text
            error = queued.json()["error"]
            assert error["type"] == "unavailable" and "the server is busy" in error["message"]

            served.process.send_signal(signal.SIGTERM)

            def refuses_connections() -> bool:
                try:
                    served.get("/healthz", timeout=2)
                except httpx.TransportError:
                    return True
                return False

            wait_until(refuses_connections, "SIGTERM to stop accepting connections", 8, 0.1)
            assert served.process.poll() is None  # still finishing the ask
        finally:
            release.set()
            asker.join(timeout=150)
        answer = in_flight["ask"]
        assert answer.status_code == 200, answer.text
        assert answer.json()["answer"] == "Parents receive sixteen weeks [Parental leave]."
        # uvicorn re-raises the signal once it has shut down cleanly: the exit status says
        # SIGTERM, as a service manager expects of a process it stopped with one
        assert served.process.wait(timeout=60) in (0, -signal.SIGTERM), served.output()
        output = served.output()
        assert "Application shutdown complete" in output and "Traceback" not in output, output
    finally:
        served.stop()
    # its pool closed its connections (a role only this server logged in as)
    with psycopg.connect(coll_kb.pg_url, autocommit=True) as admin:

        def closed() -> bool:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                (coll_kb.hr_reader,),
            ).fetchone()
            return row == (0,)

        wait_until(closed, "the server's connections to close", 10)


def test_the_database_going_away_is_a_503_and_the_server_recovers(
    hr_server: Served, coll_kb: CollKb
) -> None:
    auth = _bearer(FLAG_TOKEN)
    readme = {"query": "readme", "mode": "keyword"}
    assert _titles(hr_server.post("/v1/search", json=readme, headers=auth)) == {"HR readme"}
    db = sql.Identifier(coll_kb.dbname)
    with psycopg.connect(coll_kb.pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(db))
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (coll_kb.dbname,),
            )
            down = hr_server.post("/v1/search", json=readme, headers=auth)
            assert down.status_code == 503, down.text
            error = down.json()["error"]
            assert error["type"] == "unavailable" and "database" in error["message"], error
            health = hr_server.get("/healthz")
            assert health.status_code == 503, health.text
            assert health.json()["database"] is False and health.json()["detail"]
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(db))
    wait_until(lambda: hr_server.get("/healthz").status_code == 200, "the server to recover", 60)
    again = hr_server.post("/v1/search", json=readme, headers=auth)
    assert _titles(again) == {"HR readme"}
    assert "Traceback" not in hr_server.output(), hr_server.output()


def test_a_collection_the_role_may_not_read_stops_either_server_at_start(
    coll_kb: CollKb, tmp_path: Path
) -> None:
    """A --collection that does not exist, or that the role may not read, is a missing grant:
    the server says so in one ``Error:`` line and exits 2 before it accepts anything (it used
    to start, report itself healthy on /healthz and refuse every request with a 400)."""
    hr_only = coll_kb.role_url(coll_kb.hr_reader)
    for command, url, name in (
        (["serve", "--port", "0", "--collection", "nope"], coll_kb.url, "nope"),
        (["serve", "--port", "0", "--collection", "eng"], hr_only, "eng"),
        (["mcp", "--collection", "eng"], hr_only, "eng"),
    ):
        try:
            result = run_pgkb(command, coll_kb.env(url), tmp_path, timeout=60)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"pgkb {' '.join(command)} started: {exc.output}")
        assert result.returncode == 2, (command, result.returncode, result.stderr[-2000:])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines[0].startswith(f"Error: no collection '{name}' that role "), result.stderr
        assert "Traceback" not in result.stderr, result.stderr
