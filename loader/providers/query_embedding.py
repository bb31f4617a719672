"""How ``pgkb search`` and ``pgkb ask`` embed their query: through a running ``pgkb serve``
when ``serve_url`` is set, else with the local model, started before the database connection
is opened so that the two overlap.

**Prefetching** (:class:`PrefetchedQuery`): the query's embedding is computed in a thread
while the command connects to the database (and the server starts its backend); the search
then takes it. The model's load and the connection's setup no longer add up.

**The warm path**: the warm process has the model loaded, so the command does not load it.

:class:`ServedEmbedder` asks ``POST {serve_url}/v1/embeddings`` with the configured model's
name (the server refuses another model) and ``input_type`` (``query``: the model's query
prompt, as :meth:`embed_query` would put it; ``document``: its document prompt), checks every
vector's length, and otherwise, or when the server does not answer within ``serve_timeout``
seconds, embeds with the local model: the same vectors either way, so the same results. The
HTTP call uses the standard library (nothing to import that the local path would not).
"""

from __future__ import annotations

import array
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from loader.providers import embeddings
from loader.providers.embeddings import Embedder
from loader.settings import Settings

log = logging.getLogger(__name__)


class ServedEmbedder:
    """``embed_query`` and ``embed`` through ``serve_url``, falling back to the local
    embedder (made only when needed)."""

    def __init__(self, settings: Settings, local: Callable[[], Embedder] | None = None) -> None:
        assert settings.serve_url is not None
        self.base = settings.serve_url.rstrip("/")
        self.url = self.base + "/v1/embeddings"
        self.model = settings.embedding_model
        self.dims = settings.embedding_dims
        self.token = settings.serve_token
        self.timeout = settings.serve_timeout
        self._local = local or (lambda: embeddings.get_embedder(settings))
        self.served = 0
        """Calls the server answered (the rest were embedded locally)."""
        self.failure: str | None = None
        """Why the server was not used, once it failed (later calls go local at once)."""

    def _ask(self, texts: Sequence[str], input_type: str) -> list[list[float]] | None:
        import urllib.error
        import urllib.request

        if self.failure is not None:
            return None
        body = {"model": self.model, "input": list(texts), "input_type": input_type}
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                data: object = json.loads(response.read())
            if not isinstance(data, dict):
                raise TypeError(f"its reply is a JSON {type(data).__name__}, not an object")
            vectors = [item["embedding"] for item in sorted(data["data"], key=lambda i: i["index"])]
        except urllib.error.HTTPError as exc:
            self._failed(f"it answered {exc.code}: {_message(exc)}")
            return None
        except (OSError, ValueError, LookupError, TypeError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            return None
        if data.get("model") != self.model or len(vectors) != len(texts):
            self._failed(f"it answered for model {data.get('model')!r}")
            return None
        if any(not isinstance(v, list) or len(v) != self.dims for v in vectors):
            self._failed(f"its vectors are not {self.dims}-dimensional")
            return None
        self.served += 1
        log.info("%d %s(s) embedded by pgkb serve at %s", len(texts), input_type, self.base)
        return [[float(x) for x in v] for v in vectors]

    def _failed(self, why: str) -> None:
        self.failure = why
        log.warning("pgkb serve at %s not used (%s); embedding locally", self.base, why)

    def embed_query(self, text: str) -> list[float]:
        vectors = self._ask([text], "query")
        return vectors[0] if vectors else list(self._local().embed_query(text))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._ask(texts, "document")
        return vectors if vectors is not None else self._local().embed(texts)


def _message(exc: Any) -> str:
    """The message of an error reply (``{"error": {"message"}}``), else its reason."""
    try:
        return str(json.loads(exc.read())["error"]["message"])[:200]
    except (OSError, ValueError, LookupError, TypeError):
        return str(exc.reason)


def query_embedder(settings: Settings) -> Embedder | ServedEmbedder:
    """What ``pgkb search`` and ``pgkb ask`` embed with: the running ``pgkb serve`` at
    ``serve_url`` when it is set, else the configured embedder."""
    if settings.serve_url:
        return ServedEmbedder(settings)
    return embeddings.get_embedder(settings)


class PrefetchedQuery:
    """``embedder`` with the embedding of ``text`` started now: ``embed_query`` of that text
    takes it; any other call goes to ``embedder``.

    On Linux, in a process of one thread (the command line), the embedding runs in a forked
    child process, on the other core: loading the model (importing ONNX Runtime and numpy,
    reading the tokenizer) and opening the database connection then take the time of the
    longer, not of both. The child sends the vector back through a pipe and exits; should it
    fail, the embedding is made here, where its error is raised. Elsewhere (another system,
    threads running: a server, a test; the model already loaded here) or through a running
    ``pgkb serve`` (no model to load, an HTTP request), a thread does it."""

    def __init__(self, embedder: Embedder | ServedEmbedder, text: str) -> None:
        self.embedder = embedder
        self.text = text
        self._result: list[float] | None = None
        self._error: BaseException | None = None
        self._child: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        if _can_fork() and not isinstance(embedder, ServedEmbedder):  # a model to load
            self._child = self._fork()
        else:
            self._thread = threading.Thread(
                target=self._work, name="pgkb-query-embedding", daemon=True
            )
            self._thread.start()

    def _fork(self) -> tuple[int, int] | None:
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return None
        if pid == 0:  # the child: embed, write the float64 values, leave at once
            code = 1
            try:
                os.close(read)
                data = array.array("d", self.embedder.embed_query(self.text)).tobytes()
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                code = 0
            finally:
                os._exit(code)  # no atexit handlers, no buffers flushed twice
        os.close(write)
        return pid, read

    def _collect(self, pid: int, read: int) -> list[float] | None:
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status != 0 or not data or len(data) % 8:
            log.debug("the query's embedding process failed (status %s); embedding here", status)
            return None
        values = array.array("d")
        values.frombytes(data)
        return values.tolist()

    def _work(self) -> None:
        try:
            self._result = list(self.embedder.embed_query(self.text))
        except BaseException as exc:  # re-raised in the caller's thread
            self._error = exc

    def embed_query(self, text: str) -> list[float]:
        if text == self.text and self._child is not None:
            child, self._child = self._child, None
            vector = self._collect(*child)
            if vector is not None:
                return vector
        if text != self.text or self._thread is None:
            return list(self.embedder.embed_query(text))
        self._thread.join()
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        assert self._result is not None
        return self._result

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return list(self.embedder.embed(texts))


NATIVE_POOLS = ("onnxruntime", "torch")
"""Libraries whose native thread pools a forked child would inherit without their threads:
once one is loaded, the model is loaded too and the query embeds in milliseconds here."""


def _can_fork() -> bool:
    """Forking is safe here and worth it: Linux, no other Python thread (whose locks a child
    would inherit), and no model library loaded yet (ONNX Runtime and torch do not support a
    fork after their thread pools start; a process that has them has its model loaded)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and not any(name in sys.modules for name in NATIVE_POOLS)
    )
