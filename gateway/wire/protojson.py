"""Protobuf <-> JSON for the gateway, in the proto3 JSON mapping with proto field names.

One naming on the wire: the ``.proto`` field names (``execution_id``, not
``executionId``), as ``preserving_proto_field_name=True`` writes them. Output
carries every field, defaults included, so plain-HTTP clients never have to
know proto3's "absent means zero" rule; 64-bit integers are decimal strings
(as the mapping says) and enums are their names. Input takes byte quantities
as strings too (``"8Gi"``), as the Python API does.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from flux.domain.quantity import parse_bytes
from flux.errors import InvalidArgument

M = TypeVar("M", bound=Message)


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def to_json(message: Message) -> str:
    return json.dumps(to_dict(message), separators=(",", ":"))


# Top-level strings longer than this are set directly rather than through json_format, which
# scans each string with a regex for unpaired surrogates: 0.7 s for 14 MiB, in C, holding the
# GIL, so no thread could keep the event loop running meanwhile. Setting the field checks the
# same thing (protobuf refuses a string UTF-8 cannot encode) in milliseconds.
DIRECT_STRING_CHARS = 64 * 1024


def from_dict(value: Any, message: M, what: str = "body") -> M:
    """Fill ``message`` from JSON; a value of the wrong form is ``InvalidArgument`` naming the field."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object; got {type(value).__name__}")
    value = _integers(value, message.DESCRIPTOR, "")
    fields = message.DESCRIPTOR.fields_by_name
    direct = {
        name: text
        for name, text in value.items()
        if isinstance(text, str)
        and len(text) > DIRECT_STRING_CHARS
        and name in fields
        and fields[name].type == FieldDescriptor.TYPE_STRING
        and not fields[name].is_repeated
    }
    try:
        json_format.ParseDict({k: v for k, v in value.items() if k not in direct}, message)
    except json_format.ParseError as exc:
        raise InvalidArgument(f"{what}: {_readable(str(exc))}") from None
    for name, text in direct.items():
        try:
            setattr(message, name, text)
        except (UnicodeError, ValueError) as exc:
            raise InvalidArgument(f"{what}: {name} is not valid UTF-8 text: {exc}") from None
    return message


_PARSING = re.compile(r"Failed to parse (\w+) field: ")
# Reasons ParseError passes on from Python itself; they tell an HTTP client nothing.
_PYTHON_INTERNALS = ("invalid literal", "argument must be", "bytes-like object", "object has no attribute")


def _readable(text: str) -> str:
    """ParseError's "Failed to parse a field: Failed to parse b field: REASON" as "a.b: REASON"."""
    path = []
    while match := _PARSING.match(text):
        path.append(match[1])
        text = text[match.end() :]
    reason = text.rstrip(".")
    if any(internal in reason for internal in _PYTHON_INTERNALS):
        reason = "the value is not of this field's type (the schema is at /docs)"
    return f"{'.'.join(path)}: {reason}" if path else reason


# Messages whose 64-bit integers are all byte quantities: they also take "8Gi", "512Mi", "10G".
QUANTITY_MESSAGES = frozenset({"flux.v1.ResourceRequest", "flux.v1.WorkerResources", "flux.v1.Gpu"})
_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
    }
)
_DIGITS = re.compile(r"\s*-?[0-9]+\s*")


def _integers(value: dict[str, Any], descriptor: Descriptor, path: str) -> dict[str, Any]:
    """``value`` with byte quantities as decimal strings, refusing other non-integers by field path.

    The proto3 JSON mapping writes 64-bit integers as decimal strings, and the same
    quantities as the Python API ("8Gi") are accepted where a field holds bytes.
    """
    out = dict(value)
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None or item is None:
            continue  # ParseDict names unknown fields
        where = f"{path}.{key}" if path else key
        entry = field.message_type
        if entry is not None:
            if entry.GetOptions().map_entry:
                continue
            if field.is_repeated and isinstance(item, list):
                out[key] = [
                    _integers(x, entry, f"{where}[{i}]") if isinstance(x, dict) else x
                    for i, x in enumerate(item)
                ]
            elif isinstance(item, dict):
                out[key] = _integers(item, entry, where)
        elif field.type in _INT64:
            quantity = descriptor.full_name in QUANTITY_MESSAGES
            if field.is_repeated and isinstance(item, list):
                out[key] = [_integer(x, f"{where}[{i}]", quantity) for i, x in enumerate(item)]
            else:
                out[key] = _integer(item, where, quantity)
    return out


def _integer(item: Any, where: str, quantity: bool) -> Any:
    if not isinstance(item, str) or _DIGITS.fullmatch(item):
        return item
    if quantity:
        try:
            return str(parse_bytes(item, where))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
    raise InvalidArgument(
        f"{where} must be an integer (a JSON number or a string of digits); got {item[:40]!r}"
    )
