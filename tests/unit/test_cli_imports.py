"""``flux.cli`` has no import cycle, and no module there grows past a screenful or two.

The package's ``__init__`` imports ``main``, which imports every command: a module of
``flux.cli`` that imported from a package (``from flux.cli import x``) would close a
cycle through it. Each imports a name from the module that defines it instead. Read
from the source (runtime, function-level and ``TYPE_CHECKING`` imports alike), not by
importing, so an import that only runs on some path is checked too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import flux.cli

ROOT = Path(flux.cli.__file__).parent
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for file in sorted(ROOT.rglob("*.py")):
        parts = ("flux", *file.relative_to(ROOT.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return found


MODULES = _modules()
PACKAGES = {name for name, file in MODULES.items() if file.name == "__init__.py"}


def _imports(name: str, file: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in the file; ``names`` empty for ``import module``."""
    package = name if name in PACKAGES else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.append((module, [alias.name for alias in node.names]))
    return found


def test_no_module_imports_from_a_package_of_flux_cli() -> None:
    offending = [
        f"{name}: from {module} import {', '.join(names)}"
        for name, file in MODULES.items()
        for module, names in _imports(name, file)
        if module in PACKAGES
    ]
    assert offending == []


def test_the_modules_of_flux_cli_import_one_another_without_a_cycle() -> None:
    edges = {
        name: {module for module, _ in _imports(name, file) if module in MODULES and module != name}
        for name, file in MODULES.items()
    }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name not in done:
            for target in sorted(edges[name]):
                visit(target, (*path, name))
            done.add(name)

    for name in MODULES:
        visit(name, ())


def test_no_module_of_flux_cli_is_over_400_lines() -> None:
    long = {
        name: n for name, file in MODULES.items() if (n := len(file.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
