"""ServedEmbedder against a stand-in for ``pgkb serve``'s ``POST /v1/embeddings`` (a real HTTP
server on a free port): what it sends, the vectors it takes, and every reply it refuses in
favour of the local model (a wrong token, another model, vectors of another length, nothing
listening), after which it no longer asks."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from loader.providers.query_embedding import ServedEmbedder
from loader.settings import Settings

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DIMS = 384


class Local:
    """The local model's stand-in: its vectors are recognisable (all -1)."""

    def __init__(self) -> None:
        self.calls: list[Sequence[str]] = []

    def embed_query(self, text: str) -> list[float]:
        self.calls.append([text])
        return [-1.0] * DIMS

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[-1.0] * DIMS for _ in texts]


class Server:
    """Answers as told: ``status``, ``model``, ``dims``; records every request."""

    def __init__(self) -> None:
        self.status, self.model, self.dims = 200, MODEL, DIMS
        self.requests: list[tuple[dict[str, Any], str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((body, self.headers.get("Authorization")))
                if server.status != 200:
                    reply: dict[str, Any] = {"error": {"message": "invalid token"}}
                else:
                    value = 0.5 if body["input_type"] == "query" else 0.25
                    reply = {
                        "model": server.model,
                        "data": [
                            {"index": i, "embedding": [value + i] * server.dims}
                            for i in reversed(range(len(body["input"])))
                        ],
                    }
                data = json.dumps(reply).encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    stand_in = Server()
    thread = threading.Thread(target=stand_in.http.serve_forever, daemon=True)
    thread.start()
    yield stand_in
    stand_in.http.shutdown()
    stand_in.http.server_close()


def _embedder(url: str, local: Local, token: str | None = None) -> ServedEmbedder:
    settings = Settings(serve_url=url, serve_token=token, embedding_model=MODEL)
    return ServedEmbedder(settings, local=lambda: local)  # type: ignore[arg-type,return-value]


def test_the_query_and_the_documents_embedded_by_the_server(server: Server) -> None:
    local = Local()
    served = _embedder(server.url + "/", local, token="secret")
    assert served.embed_query("vacuum") == [0.5] * DIMS
    assert served.embed(["a", "b"]) == [[0.25] * DIMS, [1.25] * DIMS]  # in the inputs' order
    assert served.embed([]) == []
    assert local.calls == [] and served.served == 2 and served.failure is None
    (query, auth), (documents, _) = server.requests
    assert query == {"model": MODEL, "input": ["vacuum"], "input_type": "query"}
    assert documents["input_type"] == "document" and auth == "Bearer secret"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"status": 401}, "it answered 401: invalid token"),
        ({"model": "another/model"}, "it answered for model 'another/model'"),
        ({"dims": 3}, "its vectors are not 384-dimensional"),
    ],
    ids=["refused", "another-model", "other-length"],
)
def test_a_reply_it_cannot_use_leaves_the_local_model(
    change: dict[str, Any], why: str, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    for key, value in change.items():
        setattr(server, key, value)
    local = Local()
    served = _embedder(server.url, local)
    assert served.embed_query("vacuum") == [-1.0] * DIMS
    assert served.failure == why and served.served == 0
    assert f"pgkb serve at {server.url} not used ({why})" in caplog.text
    assert served.embed(["a"]) == [[-1.0] * DIMS]  # later calls: local at once
    assert len(server.requests) == 1 and local.calls == [["vacuum"], ["a"]]


def test_nothing_listening_leaves_the_local_model() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    local = Local()
    served = _embedder(f"http://127.0.0.1:{port}", local)
    assert served.embed_query("vacuum") == [-1.0] * DIMS
    assert served.failure is not None and "refused" in served.failure.lower()
