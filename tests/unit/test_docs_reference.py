"""The site's generated reference (tools/docs_reference.py) misses nothing the code has.

Each test walks the source on its own (the argparse tree, the OpenAPI document, the compiled
``flux.v1`` descriptors, the error table) and looks for every item in the generated text, so a
command, flag, route or rpc the generator skips fails here. Nothing starts a process.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tools.docs_reference import cli_reference, errors_reference, grpc_reference, http_reference

ROOT = Path(__file__).resolve().parents[2]


def _sections(markdown: str) -> dict[str, str]:
    """The CLI reference's text under each `flux …` heading, by command."""
    found: dict[str, str] = {}
    current = None
    for line in markdown.splitlines():
        heading = re.match(r"^#{2,6} (flux(?: [\w-]+)*)$", line)
        if heading:
            current = heading[1]
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


def _parser_commands() -> dict[str, argparse.ArgumentParser]:
    from flux.cli.parser import build_parser

    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(sub, f"{name} {sub_name}")

    walk(build_parser(), "flux")
    return found


def test_the_cli_reference_has_every_command_and_flag_of_the_parser() -> None:
    sections = _sections(cli_reference())
    commands = _parser_commands()
    assert len(commands) > 30, "the walk finds too little: the test would pass whatever the page says"
    missing_commands = sorted(set(commands) - set(sections))
    assert not missing_commands, f"commands missing from the CLI reference: {missing_commands}"
    assert set(sections) == set(commands), (
        f"documented but not in the parser: {set(sections) - set(commands)}"
    )
    missing = []
    for name, parser in commands.items():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            for flag in action.option_strings:
                if not re.search(rf"`{re.escape(flag)}[ `]", sections[name]):
                    missing.append(f"{name} {flag}")
            if not action.option_strings and f"`{action.metavar or action.dest}" not in sections[name]:
                missing.append(f"{name} {action.metavar or action.dest}")
            start = (action.help or "").split("%(")[0][:30].strip()  # before any %(default)s
            if start and start not in sections[name].replace("\\", ""):
                missing.append(f"{name} {action.option_strings or action.dest}: its help")
    assert not missing, f"flags, arguments or help missing from the CLI reference: {missing}"


def test_the_http_reference_has_every_route_of_the_openapi_document() -> None:
    from gateway.app import create_app

    text = http_reference()
    routes = [
        (method.upper(), path) for path, ops in create_app().openapi()["paths"].items() for method in ops
    ]
    assert len(routes) > 20
    missing = [f"{m} {p}" for m, p in routes if f"| `{m}` | `{p}` |" not in text]
    assert not missing, f"routes missing from the HTTP reference: {missing}"


def test_the_grpc_reference_has_every_service_and_rpc_with_its_comment() -> None:
    from flux.v1 import control_pb2, pools_pb2, resources_pb2, tenants_pb2, trace_pb2, worker_pb2

    text = grpc_reference()
    modules = (control_pb2, pools_pb2, resources_pb2, tenants_pb2, trace_pb2, worker_pb2)
    services = [s for m in modules for s in m.DESCRIPTOR.services_by_name.values()]
    assert {s.name for s in services} >= {"WorkerService", "ControlService", "TenantService", "PoolService"}
    missing = []
    for service in services:
        if f"## {service.full_name}" not in text:
            missing.append(service.full_name)
        missing += [f"{service.name}.{m.name}" for m in service.methods if f"| `{m.name}` |" not in text]
    messages = [d for m in modules for d in m.DESCRIPTOR.message_types_by_name.values()]
    missing += [d.full_name for d in messages if f"#### {d.full_name}\n" not in text]
    assert not missing, f"missing from the gRPC reference: {missing}"
    # Comments come from the source (protoc --include_source_info): every rpc row has one.
    rows = [line for line in text.splitlines() if line.startswith("| `") and " → " in line]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows), "an rpc without its comment"


def test_the_error_reference_has_every_code_of_the_table() -> None:
    from flux.errors import BEFORE_THE_APP, STATUS

    text = errors_reference()
    for code, status in STATUS.values():
        assert f"| `{code}` | {status} |" in text
    for status, code in BEFORE_THE_APP.items():
        assert f"| {status} | `{code}` |" in text


def test_the_configuration_page_names_every_environment_variable_flux_reads() -> None:
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    sources = [
        *(ROOT / "flux").rglob("*.py"),
        *(ROOT / "gateway").rglob("*.py"),
        ROOT / "clients/node/flux.js",
    ]
    named = {
        name
        for path in sources
        if "/v1/" not in str(path)
        for name in re.findall(r"""["'](FLUX_[A-Z_]+)["']""", path.read_text())
    }
    assert {"FLUX_SERVER", "FLUX_API_TOKEN"} <= named
    missing = sorted(name for name in named if f"`{name}`" not in page)
    assert not missing, f"read by the code but not on docs/reference/configuration.md: {missing}"
