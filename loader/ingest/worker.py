"""Extraction in a worker process, bounded in wall time, memory and CPU.

A parser that runs away on one hostile file (deeply nested HTML, a PDF that expands forever)
cannot be stopped inside the ingesting process: Python cannot kill a thread, so an abandoned
extraction kept its CPU and its memory until the run ended. Here each run has one worker process
(started on the first file that needs parsing, as a fresh Python process: the parent may hold an
ONNX runtime's threads, which ``fork`` would copy in a broken state; not through
``multiprocessing``, whose spawn method leaves a resource-tracker process behind). Files go to
it one at a time over a socket pair; the parent waits on the socket, not on a thread, for at
most ``extract_timeout`` seconds, then kills the worker and reports the file, and the next file gets
a fresh worker. The worker's address space is capped at ``extract_memory_mb`` (``RLIMIT_AS``),
so a file that would need more fails alone. A worker that dies (a parser crash, the kernel's
OOM killer) fails that file only.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any

from loader.errors import PgkbError
from loader.ingest.extract import Extracted, ExtractionError, extract

ExtractFunction = Callable[[bytes, str | Path, str | None], Extracted]

STARTUP_SECONDS = 120.0
"""How long a new worker may take to start and import its parsers (not counted against a
file's ``extract_timeout``)."""


def main(fd: int) -> None:
    """The worker process's entry point: ``fd`` is its end of the socket pair; the first message
    is the extraction function and the memory cap."""
    conn = Connection(fd)
    function, memory_bytes = conn.recv()
    _serve(conn, function, memory_bytes)


def _serve(conn: Connection, function: ExtractFunction, memory_bytes: int) -> None:
    """The worker's loop: ``(data, path, mime)`` in, ``(kind, value)`` out, until ``None``."""
    if memory_bytes > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    # the parsers are imported before the first file, so its deadline is the parsing alone
    import bs4  # noqa: F401
    import markdown_it  # noqa: F401
    import pypdf  # noqa: F401

    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        data, path, mime = job
        try:
            conn.send(("ok", function(data, path, mime)))
        except ExtractionError as exc:
            conn.send(("error", exc.message))
        except MemoryError:
            conn.send(("memory", None))
        except Exception as exc:  # a parser bug: reported as that file's failure
            conn.send(("crash", f"{type(exc).__name__}: {exc}"))


class Extractor:
    """Extracts files in a worker process that is killed at each file's deadline.

    Use as a context manager (the worker is stopped on exit); :meth:`extract` raises
    :class:`ExtractionError` for a file that fails, overruns or kills its worker.
    """

    def __init__(
        self,
        timeout: float,
        memory_mb: float,
        function: ExtractFunction = extract,
        *,
        max_text_mb: float = float("inf"),
    ) -> None:
        self.timeout = timeout
        self.memory_bytes = int(memory_mb * 1_000_000)
        self.memory_mb = memory_mb
        self.max_text_mb = max_text_mb
        """Extracted text larger than this (million characters) is refused by the caller."""
        self.function = function
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self.started = 0
        """Workers started so far (one, plus one after every kill)."""

    def __enter__(self) -> Extractor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> Connection:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # the child imports what the parent can (the function is pickled by reference)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from loader.ingest.worker import main; main(int(sys.argv[1]))",
                    str(theirs.fileno()),
                ],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=env,
            )
        except OSError as exc:
            ours.close()
            raise PgkbError(
                f"cannot start the extraction process: {exc}",
                hint="check that Python can start subprocesses here (memory, process limits)",
            ) from None
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        self._process, self._conn = process, conn
        self.started += 1
        try:
            conn.send((self.function, self.memory_bytes))
            ready = conn.poll(STARTUP_SECONDS)
            kind, _ = conn.recv() if ready else ("no answer", None)
        except (EOFError, OSError, pickle.PickleError):
            kind = "it exited"
        if kind != "ready":
            code = self._stop()
            raise PgkbError(
                f"cannot start the extraction process ({kind}, exit code {code})",
                hint="check that Python can start subprocesses here (memory, process limits)",
            )
        return conn

    def _stop(self) -> int | None:
        """Kill the worker (if any) and reap it; its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        return process.wait()

    def close(self) -> None:
        """Ask the worker to exit, and kill it if it does not at once."""
        if self._conn is not None and self._process is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(5)
        self._stop()

    def extract(self, data: bytes, path: Path, mime: str | None) -> Extracted:
        conn = self._conn if self._conn is not None else self._start()
        try:
            conn.send((data, str(path), mime))
        except (OSError, ValueError):  # the previous worker died between files
            self._stop()
            conn = self._start()
            conn.send((data, str(path), mime))
        if not conn.poll(self.timeout):
            self._stop()
            raise ExtractionError(
                f"extraction took longer than {self.timeout:g} s (extract_timeout); "
                "raise PGKB_EXTRACT_TIMEOUT to ingest it"
            )
        try:
            kind, value = conn.recv()
        except (EOFError, OSError):
            code = self._stop()
            raise ExtractionError(
                f"the extraction process died (exit code {code}) on this file; it is "
                "skipped (a parser crash, or the system ran out of memory)"
            ) from None
        return self._result(kind, value)

    def _result(self, kind: str, value: Any) -> Extracted:
        if kind == "ok":
            result: Extracted = value
            return result
        if kind == "memory":
            self._stop()  # a worker that hit its limit may be in a bad state: start afresh
            raise ExtractionError(
                f"extraction needed more than {self.memory_mb:g} MB (extract_memory_mb); "
                "raise PGKB_EXTRACT_MEMORY_MB to ingest it"
            )
        if kind == "crash":
            raise ExtractionError(f"cannot extract: {value}")
        raise ExtractionError(str(value))
