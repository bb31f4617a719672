"""A local cross-encoder that does not finish within ``rerank_timeout``, in ``pgkb search`` and
``pgkb ask --agent`` run as processes (the models guide: "It runs on the CPU, within
``rerank_timeout`` per search"; "A reranker that fails or times out never fails the search: the
results keep the fused order, ``rerank_score`` stays empty, and pgkb says so ... and in the
agent's tool results").

The cross-encoder is a tiny one the test builds (``tests/tiny_models.py``); the process is made
slow by a patch applied before pgkb's command line starts: its ``CrossEncoder.predict`` sleeps
for ``TEST_CROSS_ENCODER_DELAY`` seconds first. The same patched process with no delay reranks
(the control), so it is the delay, not the loading, that the timeout cuts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, chat_reply, tool_call
from tests.processes import CollKb, run_pgkb
from tests.tiny_models import build_cross_encoder

SLOW_PGKB = """
import os, time
from sentence_transformers import CrossEncoder

_predict = CrossEncoder.predict

def _slow_predict(self, *args, **kwargs):
    time.sleep(float(os.environ["TEST_CROSS_ENCODER_DELAY"]))
    return _predict(self, *args, **kwargs)

CrossEncoder.predict = _slow_predict
from loader.cli import main
main()
"""
QUERY = "parental leave policy readme"


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("models") / "cross")


def _slow(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pgkb ARGS`` in a process whose cross-encoder is patched to sleep first."""
    return subprocess.run(
        [sys.executable, "-c", SLOW_PGKB, *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _rerank_env(kb: CollKb, cross_encoder: Path, delay: float, timeout: float, **more: str) -> Any:
    return kb.env(
        PGKB_RERANK_PROVIDER="local",
        PGKB_RERANK_MODEL=str(cross_encoder),
        PGKB_RERANK_TIMEOUT=str(timeout),
        TEST_CROSS_ENCODER_DELAY=str(delay),
        HF_HUB_OFFLINE="1",
        **more,
    )


def _hits(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    hits: list[dict[str, Any]] = json.loads(result.stdout)
    return hits


def test_a_local_cross_encoder_past_rerank_timeout_keeps_the_fused_order(
    coll_kb: CollKb, cross_encoder: Path, tmp_path: Path
) -> None:
    args = ["search", QUERY, "--json"]
    fused = _hits(run_pgkb(args, coll_kb.env(), tmp_path))  # no reranker
    assert fused and all(h["rerank_score"] is None for h in fused)

    control = _hits(_slow(args, _rerank_env(coll_kb, cross_encoder, 0, 120), tmp_path))
    assert all(isinstance(h["rerank_score"], float) for h in control), control

    slow = _slow(args, _rerank_env(coll_kb, cross_encoder, 600, 2), tmp_path)
    hits = _hits(slow)
    assert [h["chunk_id"] for h in hits] == [h["chunk_id"] for h in fused]
    assert all(h["rerank_score"] is None for h in hits), hits
    assert (
        f"the reranker failed (the cross-encoder {cross_encoder} did not finish within 2 s "
        "(rerank_timeout)); results are in the fused order"
    ) in slow.stderr, slow.stderr
    assert "Traceback" not in slow.stderr


def test_the_agent_is_told_in_its_tool_results(
    coll_kb: CollKb, cross_encoder: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(
        "/v1/chat/completions",
        chat_reply(None, [tool_call("search_chunks", {"query": QUERY}, "s1")]),
        chat_reply("Parents receive sixteen weeks [Parental leave]."),
    )
    env = _rerank_env(
        coll_kb, cross_encoder, 600, 2,
        PGKB_CHAT_BASE_URL=fake_openai.base_url, PGKB_CHAT_MODEL="fake-chat",
        PGKB_CHAT_MAX_RETRIES="0", PGKB_CHAT_TIMEOUT="30", PGKB_ABSTENTION="false",
    )  # fmt: skip
    result = _slow(["ask", "--agent", "--json", "How long is parental leave?"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    failed = "did not finish within 2 s (rerank_timeout)); results are in the fused order"
    _first, second = fake_openai.requests_to("/v1/chat/completions")
    (tool,) = [json.loads(m["content"]) for m in second.body["messages"] if m["role"] == "tool"]
    assert tool["results"], tool
    assert any(failed in note for note in tool["notes"]), tool
    assert any(failed in note for note in answer["notes"]), answer  # the first search's
    assert answer["mode"] == "agent" and answer["citations"], answer
