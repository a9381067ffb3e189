"""The package layout keeps the architecture visible (issue 41): small modules, a pure matcher,
protobuf at the edges, packages used through their faces, the public ``flux`` names unchanged.

Read from the source (ast), like tests/unit/test_import_cycles.py: imports at any level (module
top, inside a function, under ``TYPE_CHECKING``) count, and nothing here is imported but ``flux``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import flux

REPO = Path(flux.__file__).parents[1]
GENERATED = ("flux.v1", "flux.keda")
MAX_LINES = 400

# Packages used from outside only through their face (``__init__`` and its ``__all__``).
FACED = (
    "flux.client",
    "flux.registration",
    "flux.security",
    "flux.store",
    "flux.testing",
    "gateway",
    "gateway.browser",
    "gateway.clients",
    "gateway.observe",
    "gateway.security",
    "gateway.wire",
    "gateway.workers",
)
# Modules inside a faced package that are public by their own documented name.
PUBLIC_MODULES = {
    "flux.client.aio": "the code behind flux.aio, the asyncio client's documented name",
    "flux.testing.postgres": "flux.testing.postgres.TemporaryPostgres (README, loads psycopg)",
}

# Who may import the generated flux.v1 (STYLE.md "Protobuf at the boundary"): the edges, and the
# domain types that convert themselves (to_proto / from_proto).
PROTO_EDGES = (
    "flux.server",  # the gRPC services
    "flux.client",  # the Python clients
    "flux.cli",  # renders the client's answers
    "flux.testing",  # drives a real cluster through the client
    "flux.worker.call_stream",  # the worker's transports
    "flux.worker.grpc_transport",
    "flux.worker.sse_transport",
    "flux.domain.execution",  # to_proto / from_proto
    "flux.domain.resource_request",
    "flux.domain.worker",
    "flux.domain.policy",
    "flux.domain.attempts",
    "flux.domain.limits",
    "flux.domain.gang",
    "gateway",  # HTTP in front of the gRPC core
)

# What the pure matcher must never import: it works on plain domain values, no I/O, no wire.
MATCHER_NEVER = (
    "grpc",
    "google.protobuf",
    "asyncio",
    "flux.v1",
    "flux.server",
    "flux.dispatcher",
    "flux.store",
)

# `from flux import *`: the public names, changed only on purpose (and then here too).
PUBLIC_NAMES = [
    "Concurrency", "ExecutionContext", "Gang", "RateLimit", "ResourceRequest", "Retry", "WorkflowDefinition", "workflow",
]  # fmt: skip


def _modules(*roots: str) -> dict[str, Path]:
    found = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if not name.startswith(GENERATED) and "node_modules" not in parts:
                found[name] = path
    return found


CODE = _modules("flux", "gateway")
PACKAGES = {name for name, path in CODE.items() if path.name == "__init__.py"}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _imports(name: str, path: Path) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of every import; relative imports resolved, ``names`` empty for ``import m``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            yield ".".join(p for p in (base, node.module or "") if p), [a.name for a in node.names]


def _face_names(package: str) -> set[str]:
    for node in ast.parse(CODE[package].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def test_no_module_is_over_400_lines() -> None:
    lines = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in CODE.values()}
    too_long = sorted(f"{path}: {n}" for path, n in lines.items() if n > MAX_LINES)
    assert too_long == [], "split these (the dispatcher's packages show how)"


def test_the_matcher_imports_no_io_no_wire_and_no_layer_above_it() -> None:
    matcher = {name: path for name, path in CODE.items() if _within(name, "flux.matching")}
    assert "flux.matching.scheduler" in matcher
    offending = sorted(
        f"{name}: {module}"
        for name, path in matcher.items()
        for module, _ in _imports(name, path)
        if any(_within(module, never) for never in MATCHER_NEVER)
    )
    assert offending == []


def test_only_the_edges_and_the_domain_conversions_import_flux_v1() -> None:
    importers = {
        name
        for name, path in CODE.items()
        for module, _ in _imports(name, path)
        if _within(module, "flux.v1")
    }
    assert "flux.server.control_service" in importers and "gateway.core" in importers
    offending = sorted(name for name in importers if not any(_within(name, edge) for edge in PROTO_EDGES))
    assert offending == [], "convert at the edge (flux.server, the clients, the transports, the gateway)"


def _outside_imports() -> Iterator[tuple[str, str, list[str]]]:
    sources = {**CODE, **_modules("bench", "examples", "tools")}
    for name, path in sources.items():
        for module, names in _imports(name, path):
            yield name, module, names


def test_packages_are_used_through_their_faces() -> None:
    assert set(FACED) <= PACKAGES
    offending = []
    for importer, module, names in _outside_imports():
        for package in FACED:
            if _within(importer, package) or not _within(module, package):
                continue
            # A module of the package named directly (a subpackage's own face is fine).
            if module != package and module not in PACKAGES and module not in PUBLIC_MODULES:
                inner = module[len(package) + 1 :].split(".")[0]
                if f"{package}.{inner}" not in PACKAGES:
                    offending.append(f"{importer}: {module}")
            # `from package import module` reaches past the face unless the face lists it.
            if module == package:
                hidden = {n for n in names if f"{package}.{n}" in CODE and n not in _face_names(package)}
                offending += [f"{importer}: {package}.{n}" for n in sorted(hidden)]
    assert sorted(set(offending)) == [], "import the package's face (its __init__), or add the name to it"


def test_every_face_says_what_it_offers() -> None:
    missing = sorted(package for package in (*FACED, "flux.aio") if not _face_names(package))
    assert missing == []


def test_the_public_names_of_flux_are_unchanged() -> None:
    assert sorted(flux.__all__) == PUBLIC_NAMES
    assert all(hasattr(flux, name) for name in PUBLIC_NAMES)


def test_the_documented_import_paths_still_work() -> None:
    import flux.aio
    import flux.client
    import flux.testing

    assert flux.aio.FluxClient.__module__ == "flux.client.aio"
    assert flux.client.FluxClient.__module__ == "flux.client.sync"
    assert callable(flux.testing.eventually)
