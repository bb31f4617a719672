"""Without its framework installed, a retriever's import says which extra to install (the
framework is hidden from a fresh interpreter: ``sys.modules[name] = None`` makes its import fail
as a missing package does)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("loader.integrations.langchain", "langchain_core", "pgkb[langchain]"),
        ("loader.integrations.llamaindex", "llama_index", "pgkb[llamaindex]"),
    ],
)
def test_a_missing_framework_names_its_extra(module: str, hidden: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{hidden!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install '{extra}'" in run.stdout, run.stdout + run.stderr
    assert run.stderr == ""


def test_with_the_framework_the_retrievers_import() -> None:
    code = "import loader.integrations.langchain, loader.integrations.llamaindex; print('ok')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout == "ok\n", run.stderr
