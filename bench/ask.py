"""``ask``: what answering a question costs in a warm process, step by step, and what it
answered.

Runs N questions through the answer path of ``pgkb ask`` (``answer_question``) with the model
already loaded, and reports per step (p50 / p95 / p99 ms): ``embed`` (the query's vector),
``gate`` (the abstention gate, its own embeddings included), ``chat`` (the chat model's call,
when one is configured: e.g. a local OpenAI-compatible server), ``search and context`` (hybrid
search, neighbours, prompt: the rest) and ``total``; and how many answers of each kind of
question came from the model, were extractive (no chat model) or abstained ("I don't know").
The model's load time, once per process, is reported apart.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench import common, corpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    corpus.add_options(parser, sizes="source")
    parser.add_argument("--queries", type=int, default=100, help="questions answered")
    parser.add_argument("--questions", type=Path, action="append", default=[])


def kinds(files: list[Path], n: int) -> list[tuple[str, str]]:
    """(question, kind) of the first ``n`` distinct questions of the eval files."""
    out: dict[str, str] = {}
    for path in files or [common.ROOT / name for name in common.QUESTION_FILES]:
        data = json.loads(path.read_text(encoding="utf-8"))
        for item in data["questions"] if isinstance(data, dict) else data:
            if isinstance(item, dict) and item.get("question"):
                out.setdefault(item["question"], str(item.get("kind", "-")))
    return list(out.items())[:n]


def run(args: Any) -> dict[str, Any]:
    run = common.Run("ask", args)
    figures: dict[str, Any] = {"corpora": {}}
    rows = []
    for label, url, _ in corpus.targets(args):
        run.postgres(url)
        result = answer(url, kinds(args.questions, args.queries))
        figures["corpora"][label] = result
        for name, f in result["steps_ms"].items():
            rows.append([label, name, f["n"], f["p50"], f["p95"], f["p99"]])
    run.table("Answering in a warm process, ms", ["corpus", "step", "n", "p50", "p95", "p99"], rows)
    run.table(
        "Answers by kind of question",
        ["corpus", "kind", "answers by mode"],
        [
            [label, kind, ", ".join(f"{m} {n}" for m, n in sorted(c.items()))]
            for label, r in figures["corpora"].items()
            for kind, c in r["answers"].items()
        ],
    )
    return run.finish(figures)


def answer(url: str, questions: list[tuple[str, str]]) -> dict[str, Any]:
    from loader.answer.abstention import decide
    from loader.answer.single import answer_question
    from loader.db.session import connection
    from loader.providers.chat import ChatClient
    from loader.providers.embeddings import get_embedder

    config = common.model_settings(url).replace(database_url=url)
    embedder = get_embedder(config)
    started = time.perf_counter()
    embedder.embed_query("warm up")
    load_s = time.perf_counter() - started
    phase: dict[str, float] = defaultdict(float)

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phase[name] += time.perf_counter() - t0

        return wrapper

    client = ChatClient.from_settings(config)
    if client is not None:
        client.complete = timed("chat", client.complete)  # type: ignore[method-assign]
    timed_embedder = SimpleNamespace(
        embed=embedder.embed, embed_query=timed("embed", embedder.embed_query)
    )
    gate = timed("gate", lambda c, s, t, h: decide(c, s, t, h, embed=embedder.embed))
    times: dict[str, list[float]] = defaultdict(list)
    answers: dict[str, Counter[str]] = defaultdict(Counter)
    with connection(config) as conn:
        for question, kind in questions:
            phase.clear()
            t0 = time.perf_counter()
            reply = answer_question(
                conn, config, question, embedder=timed_embedder, client=client, gate=gate
            )
            total = time.perf_counter() - t0
            rest = total - sum(phase.values())
            for name, seconds in {**phase, "search and context": rest, "total": total}.items():
                times[name].append(seconds * 1000)
            answers[kind][reply.mode] += 1
            conn.rollback()
    return {
        "model_load_s": round(load_s, 2),
        "chat_model": config.chat_model or None,
        "steps_ms": {name: common.summary(values) for name, values in times.items()},
        "answers": {kind: dict(c) for kind, c in sorted(answers.items())},
    }
