"""Import structure: no import circle between modules (function-local imports counted, so
none hides one), no module importing another's private names, and no circle between the
subpackages."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "agentic_rl"

KNOWN_PACKAGE_CIRCLE: frozenset[str] = frozenset()
"""Subpackages allowed in a circle: none. (The last one went when the chat renderer moved
down to agentic_rl.chat, Task to agentic_rl.types and the text/OpenAI message conversion
to parsers.messages.)"""


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ("agentic_rl", *path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(modules: dict[str, Path]):
    """(importer, imported module, imported name) for every import of the package, at any depth."""
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        yield module, alias.name, None
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join(package + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        yield module, target, None
                    elif base in modules:
                        yield module, base, alias.name


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def _graphs():
    modules = _modules()
    module_graph: dict[str, set[str]] = {}
    package_graph: dict[str, set[str]] = {}
    private = []
    for importer, target, name in _imports(modules):
        # A package importing its own children (its __init__ re-exports) is not a circle.
        if target == importer or target.startswith(importer + "."):
            continue
        module_graph.setdefault(importer, set()).add(target)
        if name and name.startswith("_") and not name.startswith("__"):
            private.append(f"{importer} imports {target}.{name}")
        a, b = importer.split(".")[1:2], target.split(".")[1:2]
        if a and b and a != b and (ROOT / a[0]).is_dir() and (ROOT / b[0]).is_dir():
            package_graph.setdefault(a[0], set()).add(b[0])
    return module_graph, package_graph, private


def test_no_module_import_circles_even_through_function_local_imports():
    module_graph, _, _ = _graphs()
    assert _circles(module_graph) == []


def test_no_module_imports_another_modules_private_names():
    assert _graphs()[2] == []


def test_no_circle_between_subpackages():
    _, package_graph, _ = _graphs()
    circles = _circles(package_graph)
    assert all(circle <= KNOWN_PACKAGE_CIRCLE for circle in circles), circles
