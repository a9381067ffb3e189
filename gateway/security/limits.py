"""Request body limit: refuse oversized bodies before they are buffered.

Pure ASGI so it sees the bytes as they arrive: a body with a large
``Content-Length`` is refused up front, and a chunked one as soon as it
crosses the limit, either way with 413 naming the limit.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flux.errors import ResourceExhausted, status_of

# The same ceiling as the core's gRPC messages: nothing larger could be forwarded anyway.
MAX_BODY_BYTES = 16 * 1024 * 1024


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # Answer here, not where the error surfaces: FastAPI turns any error raised
                    # while it reads a body into its own 400 before we could see it.
                    if not started and not refused:
                        refused = True
                        await self._refuse(send)
                    raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 is the answer; what the app made of the error is dropped
            started = started or message["type"] == "http.response.start"
            await send(message)

        # A response already under way when the limit is crossed can only be cut short.
        with contextlib.suppress(_TooLarge):
            await self.app(scope, counted, tracked)

    async def _refuse(self, send: Send) -> None:
        error = ResourceExhausted(f"request body is larger than the {self.limit} byte limit")
        code, status = status_of(error)
        body: dict[str, Any] = {"error": {"code": code.name, "message": str(error)}}
        payload = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                # The rest of the body is never read, so this connection cannot carry another
                # request: a kept-alive client would otherwise send its next request after bytes
                # the server takes for the body (or for an oversized head).
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
