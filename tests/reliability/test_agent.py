"""Defect 6 of issue 12 (the part in the agent's argument parsing): a model's tool arguments
crashed the agent. ``'²'.isdigit()`` is true but ``int('²')`` raises; ``int()`` of a 4,300+
digit string raises; deeply nested JSON raises RecursionError. Each now comes back to the model
as an error it can act on.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from loader.answer.tools import Toolbox
from loader.settings import Settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import HandEmbedder, chat_settings, load_corpus


def test_hostile_tool_arguments_become_errors_for_the_model(
    conn: psycopg.Connection[Any], settings: Settings, fake_openai: FakeOpenAI
) -> None:
    corpus = load_corpus(conn)
    box = Toolbox(conn, chat_settings(settings, fake_openai), HandEmbedder())
    doc = next(iter(corpus.values()))
    for arguments in (
        json.dumps({"query": "gin", "limit": "\u00b2"}),
        json.dumps({"query": "gin", "limit": "9" * 5000}),
        json.dumps({"document_id": doc, "chunk_start": "\u0663"}),  # Arabic-Indic digit 3
        json.dumps({"document_id": doc, "chunk_end": "1" * 4301}),
        "[" * 100_000 + "]" * 100_000,
        '{"query": ' + "[" * 50_000 + "]" * 50_000 + "}",
    ):
        name = "read_document" if "document_id" in arguments else "search_chunks"
        result = json.loads(box.call(name, arguments, step=1, budget=100_000))
        assert "error" in result, (arguments[:80], result)
        conn.rollback()
