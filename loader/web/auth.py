"""Signing in to the web interface: the serve token once, then a session cookie.

With a serve token set (``PGKB_SERVE_TOKEN``), the JSON API wants it as a bearer token on every
request; a browser cannot send one, so the web interface asks for it once in a form
(``POST /signin``) and answers with a session cookie: ``HttpOnly`` (no script reads it),
``SameSite=Strict`` (no other site's page makes the browser send it), ``Secure`` when the
request came over HTTPS, valid for :data:`SESSION_SECONDS`. The token itself is never put in a
URL, a page or a cookie: the cookie holds an expiry, a random nonce and an HMAC of both under a
key derived from the token and a random value the server draws when it starts, so changing the
token or restarting the server signs every browser out. Signing out ends the session on the
server: its nonce is kept as revoked until the cookie would have expired, so a copy of the
cookie (kept by a browser extension, a proxy's log, a shared machine) opens nothing afterwards.

Forms that change state (sign in, sign out) carry a CSRF token besides the ``SameSite`` cookie:
sign-in's is a random value also set as a ``SameSite=Strict`` cookie when the form is served
(double submit: a page of another site can neither read the cookie nor make the browser send
it), sign-out's is an HMAC of the session cookie. Both are compared in constant time, and a
POST whose ``Origin`` (or ``Sec-Fetch-Site``) says it came from another site is refused first.

The addresses that cost or act (:data:`COSTLY`: ``/ask?q=``, ``/ask/stream``, ``/search?q=``,
``/status?recheck=1``) are refused with a 403 page when the request says it came from another
site (:func:`cross_site`), signed in or not: without a token a page of any site could otherwise
make its visitors' browsers call the chat model or run the checks. The page says what was
refused and links to the same address, which runs once followed from this server's own page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import urllib.parse
from collections.abc import Mapping

SESSION_COOKIE = "pgkb_session"
CSRF_COOKIE = "pgkb_csrf"
SESSION_SECONDS = 12 * 3600
CSRF_SECONDS = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Sessions:
    """Session cookies signed with a key derived from the serve token."""

    def __init__(self, token: str, *, lifetime: int = SESSION_SECONDS) -> None:
        self._token = token.encode()
        # this process's own key: a revoked session stays revoked across a restart, since no
        # cookie of the previous process is valid any more (the revocations live in memory)
        started = secrets.token_bytes(16)
        self._key = hmac.new(self._token, b"pgkb web session v2" + started, hashlib.sha256).digest()
        self.lifetime = lifetime
        self._revoked: dict[str, int] = {}
        """Nonces of sessions signed out, with their expiry (dropped once expired)."""

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the serve token (constant time)."""
        return hmac.compare_digest(given.strip().encode(), self._token)

    def _sign(self, text: str) -> str:
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())

    def issue(self, now: float | None = None) -> str:
        """A new session value: ``expiry.nonce.signature``."""
        expiry = int((now if now is not None else time.time()) + self.lifetime)
        body = f"{expiry}.{_b64(secrets.token_bytes(16))}"
        return f"{body}.{self._sign(body)}"

    def valid(self, value: str | None, now: float | None = None) -> bool:
        """Whether ``value`` is a session this server issued and it has not expired."""
        if not value or value.count(".") != 2:
            return False
        body, _, signature = value.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return False
        expiry, _, nonce = body.partition(".")
        if nonce in self._revoked:
            return False
        return expiry.isdigit() and int(expiry) > (now if now is not None else time.time())

    def revoke(self, value: str | None, now: float | None = None) -> None:
        """End the session ``value`` (sign-out): it is never valid again on this server."""
        if not self.valid(value, now):
            return
        assert value is not None
        expiry, nonce, _ = value.split(".")
        moment = now if now is not None else time.time()
        for old in [n for n, until in self._revoked.items() if until <= moment]:
            del self._revoked[old]  # expired anyway: the signature check refuses it
        self._revoked[nonce] = int(expiry)

    def csrf_for(self, session: str) -> str:
        """The sign-out form's CSRF token: bound to the session, so no other page can make one."""
        return self._sign("csrf:" + session)

    def csrf_matches(self, session: str | None, given: str | None) -> bool:
        if not session or not given:
            return False
        return hmac.compare_digest(given.encode(), self.csrf_for(session).encode())


def new_csrf_value() -> str:
    """A random value for the sign-in form's double-submit CSRF check."""
    return _b64(secrets.token_bytes(24))


def same_values(cookie: str | None, field: str | None) -> bool:
    """The double-submit check: both present and equal (constant time)."""
    if not cookie or not field:
        return False
    return hmac.compare_digest(cookie.encode(), field.encode())


def cross_site(headers: Mapping[str, str], host: str) -> bool:
    """Whether a request says it came from another site: ``Sec-Fetch-Site`` of
    ``cross-site``/``same-site`` (another port of the same machine is ``same-site``), else an
    ``Origin`` or, without one, a ``Referer`` whose host is not ``host``. Browsers send
    ``Sec-Fetch-Site`` on every request (older ones an ``Origin`` on every form POST and a
    ``Referer`` unless a page turns it off); a request with none of them (a script, curl) is no
    browser's and is judged by the token alone."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null":
            return True
        _, _, rest = origin.partition("://")
        return rest.rstrip("/").lower() != host.lower()
    referer = headers.get("referer")
    if referer is None:
        return False
    return urllib.parse.urlsplit(referer).netloc.lower() != host.lower()


COSTLY = {
    "/ask": ("q", "runs the question through retrieval and the chat model"),
    "/ask/stream": ("", "runs the question through retrieval and the chat model"),
    "/search": ("q", "runs a search (the embedding model and the database)"),
    "/status": ("recheck", "runs the doctor's checks against the database"),
}
"""The web interface's addresses that cost (a model call, a search) or act (the doctor's
checks), by path: the query parameter that makes them do it ("" for always) and what they do.
Another site's page may link to them, but its visitors' browsers must not run them."""


def costly(path: str, params: Mapping[str, str]) -> str | None:
    """What the address ``path?params`` would do that costs or acts, or None when nothing."""
    entry = COSTLY.get(path)
    if entry is None:
        return None
    parameter, what = entry
    if parameter and not params.get(parameter, "").strip():
        return None
    if parameter == "recheck" and params.get("recheck") != "1":
        return None
    return what
