"""The documentation site's generated reference: the CLI from its parser, the HTTP API from the
gateway's OpenAPI document, the gRPC services from the protos, the error codes from their table.

Nothing here is committed as output: ``docs/hooks.py`` calls ``GENERATED[name]()`` while
``mkdocs build`` runs and puts the text where a page says ``<!-- generated: name -->``, so a
page cannot drift from the code it describes. Each function imports what it reads only when it
runs, and none starts a server or a process (the protos are compiled in-process by grpc_tools).
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"

# ---------------------------------------------------------------------- markdown helpers

_SPECIAL = re.compile(r"([\\*_<>\[\]|])")


def escape(text: str) -> str:
    """Prose from code (a help string, a comment) as literal Markdown text; `code spans` stay."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans at all
        return _SPECIAL.sub(r"\\\1", text).replace("`", "\\`")
    return "`".join(part if index % 2 else _SPECIAL.sub(r"\\\1", part) for index, part in enumerate(parts))


def sentence(text: str) -> str:
    """A help string as a sentence: capitalised, ending in a full stop."""
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else text + "."


def anchor(words: str) -> str:
    """The id a heading gets from mkdocs' toc extension (lowercase, words joined by '-')."""
    slug = re.sub(r"[^\w\s-]", "", words).strip().lower()
    return re.sub(r"[-\s]+", "-", slug)


# ---------------------------------------------------------------------- the CLI


@dataclass(frozen=True)
class Option:
    names: tuple[str, ...]  # ("--server",) or ("NAME",) for a positional
    metavar: str
    help: str


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]  # ("flux", "workflow", "run")
    help: str
    usage: str
    epilog: str
    options: tuple[Option, ...]
    leaf: bool

    @property
    def name(self) -> str:
        return " ".join(self.path)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias maps to the same parser
                    seen.add(id(sub))
                    yield name, helps.get(name, ""), sub


def _options(parser: argparse.ArgumentParser) -> tuple[Option, ...]:
    formatter = parser._get_formatter()
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        text = formatter._expand_help(action) if action.help else ""
        if action.option_strings:
            metavar = "" if action.nargs == 0 else formatter._format_args(action, action.dest.upper())
            found.append(Option(tuple(action.option_strings), metavar, text))
        else:
            if action.choices and not action.metavar:
                text = f"{text} (one of: {', '.join(map(str, action.choices))})".strip()
            found.append(Option((str(action.metavar or action.dest),), "", text))
    return tuple(found)


def cli_commands(parser: argparse.ArgumentParser | None = None) -> list[Command]:
    """Every command of ``flux``, groups and leaves, depth first in the parser's order."""
    if parser is None:
        from flux.cli.parser import build_parser

        parser = build_parser()

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...], help: str) -> Iterator[Command]:
        subs = list(_subcommands(p))
        usage = " ".join(p.format_usage().split())
        usage = usage.removeprefix("usage: ")
        yield Command(path, help or (p.description or ""), usage, p.epilog or "", _options(p), not subs)
        for name, sub_help, sub in subs:
            yield from walk(sub, (*path, name), sub_help)

    return list(walk(parser, ("flux",), ""))


def cli_reference() -> str:
    commands = cli_commands()
    out = ["## Commands", ""]
    for command in commands[1:]:
        depth = len(command.path) - 1
        out.append(
            f"{'    ' * (depth - 1)}- [`{command.name}`](#{anchor(command.name)}): {escape(command.help)}"
        )
    out.append("")
    for command in commands:
        level = "#" * min(len(command.path) + 1, 4)
        out += [f"{level} {command.name}", ""]
        if command.help:
            out += [escape(sentence(command.help)), ""]
        out += ["```text", command.usage, "```", ""]
        for option in command.options:
            shown = ", ".join(f"`{n}{' ' + option.metavar if option.metavar else ''}`" for n in option.names)
            out.append(f"- {shown}: {escape(option.help)}" if option.help else f"- {shown}")
        if command.options:
            out.append("")
        if command.epilog:
            out += [escape(sentence(command.epilog)), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------- the HTTP API


def http_reference() -> str:
    from gateway import create_app

    document = create_app().openapi()
    by_tag: dict[str, list[tuple[str, str, dict]]] = {}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            tag = (operation.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append((method.upper(), path, operation))
    out = [
        f"OpenAPI {document['openapi']}, `{document['info']['title']}` version {document['info']['version']}.",
        "",
    ]
    for tag, operations in by_tag.items():
        out += [f"## {tag}", "", "| method | path | what | token |", "|---|---|---|---|"]
        for method, path, operation in operations:
            description = operation.get("description") or operation.get("summary") or ""
            first = description.strip().split("\n\n")[0].replace("\n", " ")
            schemes = sorted({name for entry in operation.get("security", []) for name in entry})
            out.append(
                f"| `{method}` | `{path}` | **{escape(operation.get('summary', ''))}**: {escape(first)} "
                f"| {', '.join(f'`{s}`' for s in schemes) or 'none'} |"
            )
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------- the gRPC services


def _descriptor_set(files: list[str]):  # -> descriptor_pb2.FileDescriptorSet
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    include = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto, as `make proto` finds them
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.binpb"
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", "--include_source_info"]
        status = protoc.main([*args, f"--descriptor_set_out={out}", *files])
        if status != 0:
            raise RuntimeError(f"protoc failed ({status}) on {files}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _comments(proto) -> dict[tuple[int, ...], str]:  # a FileDescriptorProto
    found = {}
    for location in proto.source_code_info.location:
        text = (location.leading_comments or location.trailing_comments).strip()
        if text:
            found[tuple(location.path)] = " ".join(line.strip() for line in text.splitlines())
    return found


def _type_name(field) -> str:  # a FieldDescriptorProto
    from google.protobuf import descriptor_pb2

    if field.type_name:
        name = field.type_name.lstrip(".")
    else:
        name = descriptor_pb2.FieldDescriptorProto.Type.Name(field.type).removeprefix("TYPE_").lower()
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {name}"
    return f"optional {name}" if field.proto3_optional else name


def _message(out: list[str], message, comments, path: tuple[int, ...], prefix: str) -> None:
    name = f"{prefix}{message.name}"
    if message.options.map_entry:
        return
    out += [f"#### {name}", "", escape(comments.get(path, "")), ""]
    if message.field:
        out += ["| field | type | number | what |", "|---|---|---|---|"]
        for index, field in enumerate(message.field):
            what = escape(comments.get((*path, 2, index), ""))
            out.append(f"| `{field.name}` | `{_type_name(field)}` | {field.number} | {what} |")
        out.append("")
    for index, nested in enumerate(message.nested_type):
        _message(out, nested, comments, (*path, 3, index), f"{name}.")
    for index, enum in enumerate(message.enum_type):
        _enum(out, enum, comments, (*path, 4, index), f"{name}.")


def _enum(out: list[str], enum, comments, path: tuple[int, ...], prefix: str) -> None:
    out += [f"#### {prefix}{enum.name}", "", escape(comments.get(path, "")), ""]
    out += ["| value | number | what |", "|---|---|---|"]
    for index, value in enumerate(enum.value):
        out.append(f"| `{value.name}` | {value.number} | {escape(comments.get((*path, 2, index), ''))} |")
    out.append("")


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "flux" / "v1").glob("*.proto"))


def grpc_reference() -> str:
    files = proto_files()
    wanted = set(files)
    out: list[str] = []
    services: list[str] = []
    types: list[str] = []
    for proto in _descriptor_set(files).file:
        if proto.name not in wanted:
            continue
        comments = _comments(proto)
        for s_index, service in enumerate(proto.service):
            full = f"{proto.package}.{service.name}"
            services += [f"## {full}", "", f"`{proto.name}`. {escape(comments.get((6, s_index), ''))}", ""]
            services += ["| rpc | request → response | what |", "|---|---|---|"]
            for m_index, method in enumerate(service.method):
                request = ("stream " if method.client_streaming else "") + method.input_type.lstrip(".")
                response = ("stream " if method.server_streaming else "") + method.output_type.lstrip(".")
                what = escape(comments.get((6, s_index, 2, m_index), ""))
                services.append(f"| `{method.name}` | `{request}` → `{response}` | {what} |")
            services.append("")
        if proto.message_type or proto.enum_type:
            types += [f"### {proto.name}", ""]
            for index, message in enumerate(proto.message_type):
                _message(types, message, comments, (4, index), f"{proto.package}.")
            for index, enum in enumerate(proto.enum_type):
                _enum(types, enum, comments, (5, index), f"{proto.package}.")
    out += services
    out += ["## Messages and enums", "", *types]
    return "\n".join(out)


# ---------------------------------------------------------------------- error codes


def errors_reference() -> str:
    from flux import errors

    out = ["| gRPC code | HTTP status | error type | when |", "|---|---|---|---|"]
    for error, (code, status) in errors.STATUS.items():
        what = " ".join((error.__doc__ or "").split())
        out.append(f"| `{code}` | {status} | `flux.errors.{error.__name__}` | {escape(what)} |")
    out += ["", "Answered by the HTTP server before a request reaches a route:", ""]
    out += ["| HTTP status | code in the body |", "|---|---|"]
    for status, code in errors.BEFORE_THE_APP.items():
        out.append(f"| {status} | `{code}` |")
    return "\n".join(out)


GENERATED: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "http": http_reference,
    "grpc": grpc_reference,
    "errors": errors_reference,
}
