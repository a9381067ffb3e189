"""Protobuf <-> JSON for the gateway, in the proto3 JSON mapping with proto field names.

One naming on the wire: the ``.proto`` field names (``execution_id``, not
``executionId``), as ``preserving_proto_field_name=True`` writes them. Output
carries every field, defaults included, so plain-HTTP clients never have to
know proto3's "absent means zero" rule; 64-bit integers are decimal strings
(as the mapping says) and enums are their names.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

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
        # ParseError names the field path, e.g. "Failed to parse cpu_total field: ...".
        raise InvalidArgument(f"{what}: {exc}") from None
    for name, text in direct.items():
        try:
            setattr(message, name, text)
        except (UnicodeError, ValueError) as exc:
            raise InvalidArgument(f"{what}: {name} is not valid UTF-8 text: {exc}") from None
    return message
