"""Small, dependency-free guards against leaking secrets and against hostile text.

- :func:`redact` hides passwords in database URLs and DSNs, in every form libpq accepts: the
  URL's user part (``postgresql://u:secret@h/db``), a query parameter
  (``postgresql://h/db?password=secret``) and a keyword/value DSN (``host=h password=secret``,
  quoted or not), plus API keys passed in an endpoint URL's query string (``?api-key=...``).
  It works on whole messages too (an error text that quotes a DSN).
- :func:`api_key_for` decides whether the ``OPENAI_API_KEY`` environment variable may go to an
  endpoint: only to OpenAI's own API, never to a custom ``base_url`` it was not configured for.
- :func:`printable` strips terminal control sequences (ANSI escapes, C0/C1 controls other than
  newline and tab) and bidirectional overrides from text that came from a document, a file name
  or a model before it reaches a terminal; :func:`one_line` also shows newlines inside a value
  as ``\\n``; :func:`echo` is the one way every command prints human output;
  :func:`json_text` is the one way it prints JSON (C1 controls and bidi overrides escaped).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

T = TypeVar("T")

MASK = "***"

# keys whose values are secrets, in a URL query string or a keyword/value DSN
_SECRET_KEYS = (
    r"(?:password|passwd|pass|sslpassword|api[-_]?key|apikey|key|token|access[-_]?token|secret)"
)

# scheme://user:password@host  (the password may hold anything but '@' and whitespace)
_URL_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)(?P<secret>[^@\s]*)@")
# ?password=...&  or  &api_key=...
_URL_QUERY = re.compile(r"(?P<head>[?&;]" + _SECRET_KEYS + r"=)(?P<secret>[^&#\s]*)", re.I)
# password=secret, password = 'se cret', password="x"
_DSN_KEYWORD = re.compile(
    r"(?P<head>(?<![\w?&;-])" + _SECRET_KEYS + r"\s*=\s*)"
    # a quoted value, closed or not (libpq refuses an unclosed quote, and its message and ours
    # quote the string: everything after the opening quote is taken as the secret)
    r"(?P<secret>'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s'\"]+)",
    re.I,
)


def redact(text: str) -> str:
    """``text`` (a URL, a DSN or a whole message) with every password or key replaced by ***."""
    if not text:
        return text
    text = _URL_USERINFO.sub(lambda m: m.group("head") + MASK + "@", text)
    text = _URL_QUERY.sub(lambda m: m.group("head") + MASK, text)
    return _DSN_KEYWORD.sub(lambda m: m.group("head") + MASK, text)


OPENAI_HOSTS = frozenset({"api.openai.com"})


def is_openai_endpoint(base_url: str | None) -> bool:
    """True for OpenAI's own API (no base_url, or a URL whose host is api.openai.com)."""
    if not base_url:
        return True
    try:
        host = urlsplit(base_url).hostname
    except ValueError:
        return False
    return host in OPENAI_HOSTS


def api_key_for(base_url: str | None, configured: str | None, env: Mapping[str, str]) -> str | None:
    """The key to send to ``base_url``: the one configured for it (``embedding_api_key``,
    ``chat_api_key``) or else ``OPENAI_API_KEY`` from the environment, but only when the endpoint
    is OpenAI's own API: a key meant for OpenAI never goes to another server."""
    if configured:
        return configured
    if is_openai_endpoint(base_url):
        return env.get("OPENAI_API_KEY") or None
    return None


# CSI sequences (ESC [ ... final), OSC sequences (ESC ] ... BEL or ESC \), other two-byte escapes,
# then any remaining C0 control but \t and \n, DEL, and C1 controls (U+0080..U+009F)
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    r"|[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
# bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069) and the
# invisible direction marks make a terminal show text in another order than it is ("Trojan
# Source"): a file name can pose as another


def printable(text: str) -> str:
    """``text`` without terminal control sequences or bidirectional overrides: safe to print on
    a terminal (newlines and tabs kept)."""
    return _ANSI.sub("", text)


_LINE_BREAKS = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def one_line(value: object) -> str:
    """``value`` as printable text that stays on its line: newlines, carriage returns and tabs
    inside it (a file name may hold them) are shown as ``\\n``, ``\\r``, ``\\t``."""
    text = str(value)
    for char, shown in _LINE_BREAKS.items():
        text = text.replace(char, shown)
    return printable(text)


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def json_text(data: Any, *, indent: int | None = 2) -> str:
    """``data`` as indented JSON for a terminal or a pipe: non-ASCII text stays readable, but
    DEL, C1 controls, bidirectional overrides and line separators are written as ``\\uXXXX``
    escapes (C0 controls already are), so the JSON means the same and prints safely.
    ``indent=None``: one line (JSON lines)."""
    text = json.dumps(data, indent=indent, default=str, ensure_ascii=False)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


MAX_INT_DIGITS = 18
"""Tool arguments longer than this are not numbers pgkb needs (and ``int()`` of 4,300+ digit
strings raises)."""


_INT = re.compile(r"[+-]?[0-9]{1,18}", re.ASCII)


def parse_int(value: object, default: int | None = None) -> int | None:
    """An integer from a model's tool argument, or ``default``: only ASCII digits with an optional
    sign ('²' and other Unicode digits are refused), at most 18 digits; never raises."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 10**MAX_INT_DIGITS else default
    if not isinstance(value, str):
        return default
    text = value.strip()
    if _INT.fullmatch(text) is None:
        return default
    return int(text)


def json_line(data: Any) -> str:
    """``data`` as one line of JSON, escaped as :func:`json_text` escapes."""
    text = json.dumps(data, default=str, ensure_ascii=False)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_STDERR_AS_JSON = False
"""Set for a ``--json`` run (:func:`stderr_as_json`): what pgkb writes on stderr becomes one JSON
object per line, so stdout and stderr collected into one file are JSON values only."""
_LEVELS = {"red": "error", "yellow": "warning"}


def stderr_as_json(on: bool = True) -> None:
    global _STDERR_AS_JSON
    _STDERR_AS_JSON = on


def echo(message: str = "", **kwargs: object) -> None:
    """``click.echo`` of text that may come from a document or a model: control sequences are
    stripped first, so a title or an answer cannot move the cursor, retitle the terminal or
    hide text. On stderr in a ``--json`` run: ``{"level": "info", "message": ...}``."""
    if _STDERR_AS_JSON and kwargs.get("err"):
        if message:
            level = _LEVELS.get(str(kwargs.get("fg")), "info")
            click.echo(json_line({"level": level, "message": printable(message)}), err=True)
        return
    click.echo(printable(message), **kwargs)  # type: ignore[arg-type]


def secho(message: str = "", **kwargs: object) -> None:
    """``click.secho`` (styled) through the same filter as :func:`echo`."""
    if _STDERR_AS_JSON and kwargs.get("err"):
        echo(message, **kwargs)
        return
    click.secho(printable(message), **kwargs)  # type: ignore[arg-type]


def call_with_timeout(fn: Callable[[], T], seconds: float) -> T:
    """``fn()``, or :class:`TimeoutError` when it runs longer than ``seconds``.

    ``fn`` runs in a daemon thread: on timeout the caller moves on at once, and the abandoned
    call finishes (or dies with the process) in the background. Python cannot stop a thread,
    so this bounds the caller's wait, not the CPU the call burns.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="pgkb-bounded-call", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"took longer than {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    value: T = outcome["value"]
    return value
