"""No import cycle anywhere in flux/ or gateway/: each module's imports, at any level (module top, inside a
function, under TYPE_CHECKING), form a graph without a cycle, so every layer can be read and
loaded without the ones above it. Read from the source (ast): no module is imported here."""

from __future__ import annotations

import ast
from pathlib import Path

import flux

ROOTS = (Path(flux.__file__).parent, Path(flux.__file__).parents[1] / "gateway")
GENERATED = ("flux.v1", "flux.keda")


def _modules() -> dict[str, Path]:
    found = {}
    for path in (p for root in ROOTS for p in root.rglob("*.py")):
        parts = path.relative_to(ROOTS[0].parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not name.startswith(GENERATED):
            found[name] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The flux modules ``path`` imports; ``from package import name`` runs the package too."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in known:
                out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_flux_or_gateway_imports_in_a_cycle() -> None:
    known = _modules()
    assert "flux.dispatcher.core" in known and "flux.cli.main" in known
    assert {"flux.client", "flux.store", "gateway.app", "gateway.wire.stream"} <= known.keys()
    graph = {name: _imports(path, known) - {name} for name, path in known.items()}
    assert _cycles(graph) == []
