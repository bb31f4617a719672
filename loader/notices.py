"""What pgkb tells the person at the terminal while it prepares something that takes a while,
once, when it really happens: the embedding model being fetched, its ONNX graph built, the
embedded server created.

Library code calls :func:`notice`; the message is logged (``loader.notices``, INFO) and given
to the handler the command line installs (:func:`set_handler`: one line on stderr). A library
caller sees nothing unless it installs a handler or shows INFO logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

_handler: Callable[[str], None] | None = None


def set_handler(handler: Callable[[str], None] | None) -> None:
    """Where notices go besides the log (None: only the log)."""
    global _handler
    _handler = handler


def notice(message: str) -> None:
    """Tell what is being prepared now (one line, no trailing period needed)."""
    log.info("%s", message)
    if _handler is not None:
        _handler(message)
