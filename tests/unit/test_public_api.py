"""The public Python API (``loader.app``) is what its reference page lists: every name in
``__all__`` is documented there and importable, and the page names nothing else as a name of
the module."""

from __future__ import annotations

import re
from pathlib import Path

import loader.app

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "python.md"


def test_the_reference_page_lists_the_public_names() -> None:
    text = PAGE.read_text(encoding="utf-8")
    cells = set(re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)", text, flags=re.M))
    cells |= set(re.findall(r"`([A-Z][A-Z_]+)` \(\d+\)", text))
    public = set(loader.app.__all__)
    assert public - cells == set(), "not on docs/reference/python.md"
    assert cells - public == set(), "on docs/reference/python.md but not in loader.app.__all__"
    for name in public:
        assert getattr(loader.app, name) is not None
