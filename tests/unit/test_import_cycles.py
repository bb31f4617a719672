"""The loader's modules and packages import one way: no import cycle, at any level.

Imports are read with ``ast`` from every module of ``loader/``, those at the top and those inside
functions (a function-level import hides a cycle from Python's import machinery, not from a
reader). A cycle between two modules, or between two packages (``loader.ingest`` importing
``loader.ops`` while ``loader.ops`` imports ``loader.ingest``), fails with the modules named.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

LOADER = Path(__file__).resolve().parents[2] / "loader"


def _module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in sorted(LOADER.rglob("*.py")):
        parts = path.relative_to(LOADER.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _imports(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The loader modules ``module`` imports, anywhere in its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    known = _module_names()
    return {module: _imports(module, path, known) for module, path in known.items()}


def package_graph(modules: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """``loader.<package>`` -> the other ``loader.<package>``\\ s its modules import."""

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph: dict[str, set[str]] = {package(m): set() for m in modules}
    for module, targets in modules.items():
        graph[package(module)].update(package(t) for t in targets if package(t) != package(module))
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _edges_within(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    return [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_are_read(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from loader.graph import store\n    import loader.ops.runs\n")
    known = {"loader.graph.store": module, "loader.ops.runs": module, "loader.graph": module}
    assert _imports("loader.x", module, known) == {"loader.graph.store", "loader.ops.runs"}


def test_no_module_import_cycle() -> None:
    graph = import_graph()
    assert "loader.graph.store" in graph and "loader.ingest.pipeline" in graph
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(
        ", ".join(_edges_within(graph, component)) for component in found
    )


def test_no_package_import_cycle() -> None:
    graph = package_graph(import_graph())
    assert "loader.ops" in graph["loader.cli"]  # the graph is not empty
    found = cycles(graph)
    assert not found, "packages importing each other: " + "; ".join(
        ", ".join(_edges_within(graph, component)) for component in found
    )
