"""The query path loads no torch, transformers or sentence-transformers: ``pgkb search``,
``pgkb ask`` and the start of ``pgkb serve`` and ``pgkb mcp`` (up to their first answer), each
in a fresh interpreter, with the real local model (all-MiniLM-L6-v2 on ONNX Runtime). The
libraries are installed here (the test extra), so importing them would show.

And the warm path: with ``PGKB_SERVE_URL`` pointing at a running ``pgkb serve``, ``pgkb
search`` and ``pgkb ask`` embed through it and print what they print without it, and fall back
to the local model when it does not answer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve_fixtures import ServeKb, serve_kb  # noqa: F401  (fixture)

pytestmark = pytest.mark.model

HEAVY = ("torch", "transformers", "sentence_transformers")
QUERY = "How do I build an index without locking writes?"

# Runs the pgkb command line in this interpreter, then writes which heavy libraries it loaded.
# For the servers, their loop is replaced by one call answered (what an agent's first tool call
# or a service's first request would run), so the process ends.
PROBE = """
import json, os, sys
from loader.cli import main

def first_answer(service, *args, **options):
    from loader.app import SearchRequest
    result = service.search(SearchRequest(os.environ["PROBE_QUERY"]))
    assert result.hits, result

import loader.providers.query_embedding, loader.serve.http, loader.serve.mcp
loader.serve.http.run = first_answer
loader.serve.mcp.run = first_answer
# the query embedded in this process (not in a forked child), so its imports are seen here
loader.providers.query_embedding._can_fork = lambda: False
sys.argv = ["pgkb", *json.loads(os.environ["PROBE_ARGS"])]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(os.environ["PROBE_HEAVY"])))
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump({"code": code, "heavy": heavy}, out)
"""


def _env(kb: ServeKb, **more: str) -> dict[str, str]:
    return {**os.environ, **kb.env(kb.url), **more}


def _probe(kb: ServeKb, tmp_path: Path, args: list[str], **more: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "probe.json"
    env = _env(
        kb,
        PROBE_ARGS=json.dumps(args),
        PROBE_QUERY=QUERY,
        PROBE_HEAVY=json.dumps(HEAVY),
        PROBE_OUT=str(out),
        **more,
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.is_file(), done.stderr
    return json.loads(out.read_text()), done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["search", QUERY],
        ["search", QUERY, "--mode", "vector", "--json"],
        ["ask", QUERY],
        ["serve", "--port", "0"],
        ["mcp"],
    ],
    ids=["search", "search-vector-json", "ask", "serve", "mcp"],
)
def test_the_query_path_loads_no_torch(
    args: list[str],
    serve_kb: ServeKb,  # noqa: F811
    tmp_path: Path,
) -> None:
    result, stdout = _probe(serve_kb, tmp_path, args)
    assert result["code"] == 0
    assert result["heavy"] == []
    if args[0] in ("search", "ask"):
        assert "createindex.md" in stdout  # it answered, with the model's vectors


def test_the_probe_sees_a_heavy_import(
    serve_kb: ServeKb,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The check above can fail: the torch backend, asked for, loads torch."""
    result, stdout = _probe(serve_kb, tmp_path, ["search", QUERY], PGKB_EMBEDDING_BACKEND="torch")
    assert result["code"] == 0
    assert "torch" in result["heavy"] and "sentence_transformers" in result["heavy"]
    assert "createindex.md" in stdout


# --- the warm path ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def running_serve(
    serve_kb: ServeKb,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A real ``pgkb serve`` process on the knowledge base, with a token."""
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", "from loader.cli import main; main()", "serve", "--port",
             str(port)],
            env=_env(serve_kb, PGKB_SERVE_TOKEN="warm-token"),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    try:
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "pgkb serve did not start"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)


def _run(kb: ServeKb, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from loader.cli import main; main()", *args],
        env=_env(kb, **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "args",
    [["search", QUERY], ["search", QUERY, "--json", "-n", "3"], ["ask", QUERY], ["ask", "--json",
     "Is there a bike-to-work scheme?"]],
    ids=["search", "search-json", "ask", "ask-abstains-json"],
)  # fmt: skip
def test_search_and_ask_through_a_running_serve_print_the_same(
    args: list[str],
    running_serve: str,
    serve_kb: ServeKb,  # noqa: F811
) -> None:
    local = _run(serve_kb, args)
    assert local.returncode == 0, local.stderr
    warm = _run(
        serve_kb, [*args, "-v"], PGKB_SERVE_URL=running_serve, PGKB_SERVE_TOKEN="warm-token"
    )
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == local.stdout
    assert f"embedded by pgkb serve at {running_serve}" in warm.stderr
    assert "not used" not in warm.stderr and "loaded " not in warm.stderr  # no local model
    # the server down (nothing listens there): the local model, the same output, and why
    down = _run(serve_kb, args, PGKB_SERVE_URL=f"http://127.0.0.1:{_free_port()}")
    assert down.returncode == 0, down.stderr
    assert down.stdout == local.stdout
    assert "not used" in down.stderr and "Connection refused" in down.stderr
    # a wrong token: refused, so the local model again
    refused = _run(serve_kb, args, PGKB_SERVE_URL=running_serve, PGKB_SERVE_TOKEN="wrong")
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout == local.stdout
    assert "it answered 401" in refused.stderr
