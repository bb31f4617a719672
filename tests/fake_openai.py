"""A small local HTTP server that speaks the OpenAI wire format, for tests.

It serves ``POST /v1/embeddings``, ``POST /v1/chat/completions`` and ``POST /v1/rerank`` (the
Cohere/Jina/TEI/vLLM rerank shape) on 127.0.0.1 (a free port),
records every request it receives (path, headers, JSON body), and answers from a script:

    server.script("/v1/chat/completions", chat_reply("Paris [Geography]"))
    server.script("/v1/embeddings", Reply(status=429, headers={"Retry-After": "0"}))
    server.script("/v1/chat/completions", Reply(delay=5))       # a timeout for the client

Scripted replies are used once each, in order; with none left, ``/v1/embeddings`` returns
deterministic vectors (``dims`` long, or the request's ``dimensions``, derived from each
input's hash) and
``/v1/chat/completions`` answers "I don't know" and ``/v1/rerank`` ranks by word overlap
(:func:`rerank_reply`). Chat requests with ``"stream": true`` get the
reply as server-sent events.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclasses.dataclass
class Reply:
    body: Any = None
    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None
    """Send these bytes as the body instead of JSON (for malformed responses)."""
    trickle: float = 0.0
    """Seconds between pieces: streamed chunks, or the bytes of a plain body (a slow server)."""
    drop_after: int | None = None
    """Streaming: close the connection after this many content chunks, without finishing."""
    hold: threading.Event | None = None
    """Answer only once this is set (at most ``delay`` seconds, 60 if no delay): a server that
    is late for as long as the test wants, without racing the machine's load."""
    pause_after: int | None = None
    """Streaming: after this many content chunks, wait for ``resume`` (at most 60 s) before
    sending the rest: a test can see what its client received while the reply is unfinished."""
    resume: threading.Event | None = None


@dataclasses.dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


def chat_reply(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None) -> Reply:
    """A chat-completions response with ``content`` and/or ``tool_calls``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Reply(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "fake-chat",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


def tool_call(
    name: str, arguments: dict[str, Any] | str, call_id: str = "call_1"
) -> dict[str, Any]:
    """One tool call; ``arguments`` may be a raw (even malformed) JSON string."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def overlap_score(query: str, document: str) -> float:
    """The share of the query's words found in the document: the fake reranker's relevance."""
    words = set(query.lower().split())
    found = set(document.lower().replace("\n", " ").split())
    return len(words & found) / max(len(words), 1)


def rerank_reply(request: Request) -> Reply:
    """``POST /rerank`` as Cohere/Jina/TEI/vLLM answer it: the best ``top_n`` documents by
    :func:`overlap_score`, best first, as ``results: [{index, relevance_score}]``."""
    body = request.body or {}
    documents = [str(d) for d in body.get("documents", [])]
    scored = sorted(
        ((i, overlap_score(str(body.get("query", "")), d)) for i, d in enumerate(documents)),
        key=lambda pair: (-pair[1], pair[0]),
    )
    top_n = int(body.get("top_n") or len(documents))
    return Reply(
        {
            "id": "rerank-test",
            "results": [{"index": i, "relevance_score": s} for i, s in scored[:top_n]],
            "meta": {"billed_units": {"search_units": 1}},
        }
    )


def fake_vector(text: str, dims: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dims)]
    norm = sum(v * v for v in raw) ** 0.5 or 1.0
    return [v / norm for v in raw]


class FakeOpenAI:
    def __init__(self, dims: int = 8) -> None:
        self.dims = dims
        self.requests: list[Request] = []
        self._scripts: dict[str, collections.deque[Reply | Callable[[Request], Reply]]] = (
            collections.defaultdict(collections.deque)
        )
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, path: str, *replies: Reply | Callable[[Request], Reply]) -> None:
        with self._lock:
            self._scripts[path].extend(replies)

    def requests_to(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, request: Request) -> Reply:
        with self._lock:
            queue = self._scripts.get(request.path)
            scripted = queue.popleft() if queue else None
        if scripted is not None:
            return scripted(request) if callable(scripted) else scripted
        if request.path == "/v1/embeddings":
            inputs = request.body.get("input", [])
            if isinstance(inputs, str):
                inputs = [inputs]
            dims = int(request.body.get("dimensions") or self.dims)  # as text-embedding-3
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(str(t), dims)}
                for i, t in enumerate(inputs)
            ]
            return Reply(
                {
                    "object": "list",
                    "data": data,
                    "model": request.body.get("model"),
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
            )
        if request.path == "/v1/chat/completions":
            return chat_reply("I don't know")
        if request.path == "/v1/rerank":
            return rerank_reply(request)
        return Reply({"error": {"message": f"no route {request.path}"}}, status=404)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with fake._lock:
                    fake.requests.append(request)
                reply = fake._next(request)
                if reply.hold is not None:
                    reply.hold.wait(reply.delay or 60)
                elif reply.delay:
                    time.sleep(reply.delay)
                try:
                    if (
                        request.path == "/v1/chat/completions"
                        and isinstance(body, dict)
                        and body.get("stream")
                        and reply.status == 200
                        and reply.raw is None
                    ):
                        self._stream(reply)
                        return
                    payload = (
                        reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                    )
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if reply.trickle:
                        for i in range(len(payload)):
                            self.wfile.write(payload[i : i + 1])
                            self.wfile.flush()
                            time.sleep(reply.trickle)
                    else:
                        self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if reply.drop_after is not None:  # promise more than is sent: a broken body
                    self.send_header("Content-Length", "1000000")
                self.end_headers()
                message = reply.body["choices"][0]["message"]
                content = message.get("content") or ""
                base = {
                    "id": "chatcmpl-test",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": "fake-chat",
                }
                pieces = [content[i : i + 8] for i in range(0, len(content), 8)] or [""]
                for n, piece in enumerate(pieces):
                    if reply.pause_after is not None and n == reply.pause_after:
                        self.wfile.flush()
                        assert reply.resume is not None
                        reply.resume.wait(60)
                    if reply.drop_after is not None and n >= reply.drop_after:
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)  # mid-stream: no final chunk, no [DONE]
                        return
                    chunk = {
                        **base,
                        "choices": [
                            {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                        ],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    if reply.trickle:
                        self.wfile.flush()
                        time.sleep(reply.trickle)
                if message.get("tool_calls"):
                    calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
                    chunk = {
                        **base,
                        "choices": [
                            {"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}
                        ],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                final = {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {},
                            "finish_reason": reply.body["choices"][0]["finish_reason"],
                        }
                    ],
                }
                self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()

        return Handler


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
