"""JSON bodies decoded off the event loop once they are large.

The gateway beside the core shares its event loop: decoding a 14 MiB body
there (tens of milliseconds, more for deep documents) stalls every gRPC call
and every SSE stream for as long. Small bodies, nearly all of them, are
decoded in place, where a thread hop would cost more than the decoding.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

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


async def large_json_dumps(value: Any, request: Request) -> str:
    """``json.dumps(value)``, on a thread when the request that carried it was large."""
    if len(await request.body()) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(json.dumps, value)
    return json.dumps(value)
