"""JSON bodies decoded and converted off the event loop once they are large.

The gateway beside the core shares its event loop: decoding a 14 MiB body
there (about 60 ms) and converting it to protobuf (``json_format`` is pure
Python: close to a second for a 14 MiB string) would stall every gRPC call
and every SSE stream for as long. On a thread the loop keeps running: the
decoder holds the GIL only while in C, and the converter gives it up every
switch interval. Small bodies, nearly all of them, are handled in place,
where a thread hop would cost more than the work.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.routing import APIRoute
from google.protobuf.message import Message

import gateway.wire.protojson as protojson
from flux.errors import InvalidArgument

M = TypeVar("M", bound=Message)
T = TypeVar("T")

# Above this many bytes a body is decoded on a worker thread.
OFF_LOOP_BYTES = 256 * 1024


class OffLoopJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_decoded"):
            body = await self.body()
            if len(body) > OFF_LOOP_BYTES:
                self._decoded = await asyncio.to_thread(json.loads, body)
            else:
                self._decoded = json.loads(body)
        return self._decoded


class OffLoopJSONRoute(APIRoute):
    """Routes whose request decodes large JSON bodies on a thread (FastAPI's custom route class hook)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def off_loop(request: Request) -> Response:
            return await handler(OffLoopJSONRequest(request.scope, request.receive))

        return off_loop


async def sized_to(request: Request, work: Callable[[], T]) -> T:
    """``work()``, on a thread when the request it serves carried a large body.

    Converting or encoding a large body is pure Python that would hold the event loop the
    gRPC core shares; a small one costs less than the hop to a thread.
    """
    if len(await request.body()) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(work)
    return work()


async def large_json_dumps(value: Any, request: Request) -> str:
    """``json.dumps(value)``, on a thread when the request that carried it was large."""
    return await sized_to(request, lambda: json.dumps(value))


# One encoder for every value (json.dumps with an argument makes a new one per call).
_ENCODER = json.JSONEncoder(allow_nan=False)


async def large_json_dumps_each(values: list[Any], request: Request) -> list[str]:
    """Each value as JSON (NaN and Infinity refused, naming the index), on a thread for a large request."""

    def dumps() -> list[str]:
        encoded, encode = [], _ENCODER.encode
        for index, value in enumerate(values):
            try:
                encoded.append(encode(value))
            except ValueError:
                raise InvalidArgument(
                    f"inputs[{index}] is not valid JSON: NaN and Infinity are not JSON"
                ) from None
        return encoded

    return await sized_to(request, dumps)


async def to_message(value: Any, message: M, request: Request) -> M:
    """``protojson.from_dict(value, message)``, on a thread when the request that carried it was large."""
    return await sized_to(request, lambda: protojson.from_dict(value, message))
