"""MkDocs hook: the reference pages are generated from the code at build time.

A marker line (``<!-- pgkb:settings -->``, ``<!-- pgkb:cli -->``, ``<!-- pgkb:sql -->``) in a
page is replaced by the reference ``loader.devtools.reference`` generates from
``loader/settings.py``, the Click command tree and ``sql_functions/*.sql``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# document this checkout's code, not another installed copy of pgkb
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    from loader.devtools.reference import expand

    return expand(markdown)
