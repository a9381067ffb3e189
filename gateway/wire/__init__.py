"""How a ``flux.v1`` message or stream becomes HTTP, for every route of the gateway.

- ``protojson``: messages to and from the proto3 JSON mapping (proto field names).
- ``schema``: pydantic models derived from the descriptors, so OpenAPI shows the wire shapes.
- ``bodies``: JSON bodies decoded off the event loop once they are large.
- ``errors``: refusals as HTTP answers, from the one table in ``flux.errors``.
- ``stream``: one SSE connection relaying one gRPC stream.
"""

import gateway.wire.errors as errors
import gateway.wire.protojson as protojson
import gateway.wire.schema as schema
from gateway.wire.bodies import (
    OffLoopJSONRoute,
    large_json_dumps,
    large_json_dumps_each,
    sized_to,
    to_message,
)
from gateway.wire.errors import error_response, from_rpc, from_status
from gateway.wire.stream import first_message, open_stream, opened, relay

__all__ = [
    "OffLoopJSONRoute", "error_response", "errors", "first_message", "from_rpc", "from_status",
    "large_json_dumps", "large_json_dumps_each", "open_stream", "opened", "protojson", "relay",
    "schema", "sized_to", "to_message",
]  # fmt: skip
