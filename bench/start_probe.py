"""A one-off probe (deleted after use): where the start of ``pgkb search`` and ``pgkb mcp`` goes.

``python bench/start_probe.py imports MODULE ...``: each module's import time, in order, in one
interpreter (what the first import of each costs after the ones before it).
``python bench/start_probe.py model``: the local model's load, step by step (numpy, ONNX Runtime,
the tokenizer, the session, the first query).
``python bench/start_probe.py mcp``: ``pgkb mcp``'s start, phase by phase (PGKB_DATABASE_URL).
"""

from __future__ import annotations

import importlib
import sys
import time

started = last = time.perf_counter()


def lap(what: str) -> None:
    global last
    now = time.perf_counter()
    print(f"{what:38s} {1000 * (now - last):7.1f} ms  (at {1000 * (now - started):7.1f} ms)")
    last = now


def imports(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)
        lap(f"import {name}")


def model() -> None:
    import numpy as np

    lap("import numpy")
    import onnxruntime as ort

    lap("import onnxruntime")
    from pathlib import Path

    from loader.providers import local
    from loader.providers.onnx_backend import cached_graph, read_pipeline, shipped_graph

    lap("import loader.providers.local")
    embedder = local.LocalEmbedder()
    tokenizer = embedder.tokenizer
    lap("the tokenizer (tokenizer.json)")
    pipeline = read_pipeline(embedder.path())
    graph = shipped_graph(pipeline) or cached_graph(
        pipeline, Path(local.default_cache_dir()) / "onnx"
    )
    lap("the graph's path (folder digest)")
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")
    session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    lap("the session")
    ids = np.array([tokenizer.encode("How do I build an index without locking writes?").ids])
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    session.run(None, feed)
    lap("the first query")


def mcp() -> None:
    import loader.cli.main  # noqa: F401
    from loader.settings import load_settings

    lap("the command line (loader.cli.main)")
    settings = load_settings()
    from loader.serve.mcp import build_server
    from loader.serve.service import KnowledgeService

    lap("import loader.serve.mcp (pgkb's side)")
    service = KnowledgeService(settings)
    service.embed_query("warm up")
    lap("the model's load (warm-up query)")
    service.open()
    lap("open(): connection, schema, pool")
    build_server(service)
    lap("build_server (the MCP SDK's import)")
    service.search("How do I build an index without locking writes?")
    lap("the first search")
    service.close()


if __name__ == "__main__":
    what, rest = sys.argv[1], sys.argv[2:]
    {"imports": lambda: imports(rest), "model": model, "mcp": mcp}[what]()
