"""The crawler's rules that need no server: which resolved addresses are public (a redirect
from a public start to any other is refused), origins as the run compares them, charsets.
No traffic is sent: addresses are only parsed."""

from __future__ import annotations

import pytest

from loader.errors import ConfigError
from loader.ingest.web import address_is_public, decode_text, private_target_refusal
from loader.settings_checks import origin_list, origin_of


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.8.9.10", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.20",
     "169.254.169.254", "fe80::1%eth0", "fc00::5", "100.64.0.1", "0.0.0.0", "::",
     "::ffff:127.0.0.1", "::ffff:10.0.0.1", "224.0.0.1", "240.0.0.1"],
)  # fmt: skip
def test_loopback_private_and_link_local_addresses_are_not_public(address: str) -> None:
    assert not address_is_public(address)
    refusal = private_target_refusal(True, address, "http://inside/")
    assert refusal is not None and address in refusal and "private" in refusal


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::6810:85e5", "8.8.4.4"])
def test_public_addresses_are_public(address: str) -> None:
    assert address_is_public(address)
    assert private_target_refusal(True, address, "http://outside/") is None


def test_a_private_start_may_redirect_to_private_addresses() -> None:
    """An intranet page given by the user (a private start) may redirect inside it."""
    assert private_target_refusal(False, "10.0.0.7", "http://wiki.internal/") is None


def test_origins_are_scheme_host_and_port() -> None:
    assert origin_of("HTTP://Docs.Example.org:80/a/b?c") == "http://docs.example.org"
    assert origin_of("https://docs.example.org:8443/") == "https://docs.example.org:8443"
    assert origin_of("http://[::1]:8080/") == "http://[::1]:8080"
    assert origin_list("https://a.example, http://b.example:81") == (
        "https://a.example",
        "http://b.example:81",
    )
    with pytest.raises(ConfigError, match="not an http"):
        origin_of("ftp://a.example")


def test_charsets_header_then_declared_then_utf8() -> None:
    assert decode_text("café".encode("latin-1"), "iso-8859-1", html=False) == "café"
    # the header wins over the document's own declaration
    body = '<meta charset="utf-8"><p>€</p>'.encode("cp1252")
    assert "€" in decode_text(body, "windows-1252", html=True)
    assert "€" in decode_text(body.replace(b"utf-8", b"windows-1252"), None, html=True)
    xml = '<?xml version="1.0" encoding="shift_jis"?><p>東京</p>'.encode("shift_jis")
    assert "東京" in decode_text(xml, None, html=True)
    assert decode_text("naïve".encode(), None, html=False) == "naïve"
