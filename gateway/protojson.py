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
from google.protobuf.message import Message

from flux.errors import InvalidArgument

M = TypeVar("M", bound=Message)


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def to_json(message: Message) -> str:
    return json.dumps(to_dict(message), separators=(",", ":"))


def from_dict(value: Any, message: M, what: str = "body") -> M:
    """Fill ``message`` from JSON; a value of the wrong form is ``InvalidArgument`` naming the field."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object; got {type(value).__name__}")
    try:
        return json_format.ParseDict(value, message)
    except json_format.ParseError as exc:
        # ParseError names the field path, e.g. "Failed to parse cpu_total field: ...".
        raise InvalidArgument(f"{what}: {exc}") from None
