"""``pgkb serve --open``: open the web interface in the default browser once the server
accepts connections (a background thread polls the port for up to a minute)."""

from __future__ import annotations

import logging
import socket
import threading
import time
import webbrowser

log = logging.getLogger(__name__)


def page_url(host: str, port: int) -> str:
    """The address a browser on this machine opens: the wildcard addresses become loopback."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def open_when_ready(host: str, port: int, timeout: float = 60.0) -> threading.Thread:
    """Start the thread that waits for ``host:port`` to accept, then opens the page."""
    address = page_url(host, port)

    def wait_and_open() -> None:
        target = address.split("//", 1)[1].rstrip("/").rsplit(":", 1)[0].strip("[]")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((target, port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            log.warning("the server did not answer within %.0f s; open %s yourself", timeout,
                        address)  # fmt: skip
            return
        if not webbrowser.open(address):
            log.warning("no browser could be started; open %s yourself", address)

    thread = threading.Thread(target=wait_and_open, name="pgkb-open-browser", daemon=True)
    thread.start()
    return thread
