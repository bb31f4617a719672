"""Stale graph edges (second review): the spec says re-indexing a document clears the
model-made edges where it is the source or the target; only the outgoing ones were cleared, so
an edge another document's chat call proposed into it survived even when no model proposed it
any more (reproduced with the fake chat server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI, Reply, Request, chat_reply
from tests.ingest.test_graph_ingest import _chat, _corpus, _edges, _prompt, _settings, page


def _model(relations: dict[str, list[dict[str, str]]]) -> Any:
    """A chat model that describes any page and proposes ``relations[title]`` for it."""

    def reply(request: Request) -> Reply:
        prompt = _prompt(request)
        title = next(t for t in relations if f"Title: {t}\n" in prompt)
        return chat_reply(
            json.dumps(
                {
                    "summary": f"{title}, as the model sees it.",
                    "doc_type": "manual",
                    "key_entities": [],
                    "relations": relations[title],
                }
            )
        )

    return reply


def test_reindexing_a_document_clears_model_edges_into_it(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    settings = _settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])  # no model: link edges only
    chat = _chat(settings, fake_openai)

    # Alpha is re-indexed with a model that proposes Alpha -> Beta
    (root / "a.html").write_text(page("Alpha Page", "<p>Alpha, rewritten, about beta.</p>"))
    model = _model(
        {
            "Alpha Page": [{"to": "D1", "relation_type": "supersedes", "evidence": "newer"}],
            "Beta Page": [],
        }
    )
    fake_openai.script("/v1/chat/completions", model)
    assert ingest_paths(chat, [root]).changed == 1
    assert ("Alpha Page", "Beta Page", "llm", "newer") in _edges(conn)

    # Beta is re-indexed; no model proposes the edge any more: it goes, Alpha's links stay
    (root / "b.html").write_text(
        page("Beta Page", '<p>Beta, rewritten, back to <a href="a.html">alpha</a>.</p>')
    )
    fake_openai.script("/v1/chat/completions", model)  # one reply per scripted entry
    assert ingest_paths(chat, [root]).changed == 1
    edges = _edges(conn)
    assert not [e for e in edges if e[2] == "llm"], edges
    assert [e for e in edges if e[2] == "link"], edges
