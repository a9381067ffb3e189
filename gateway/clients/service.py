"""One administrative gRPC service as the REST routes call it: its stub over the core's channel,
with the caller's ``authorization`` passed on, so the core decides who may do what (the gateway
holds no tenancy of its own). The tenants' and the limits' routes share it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway.wire import protojson


class ServiceCalls:
    def __init__(self, request: Request, stub: Callable[[Any], Any]):
        self._stub = stub(request.app.state.core.channel)
        authorization = request.headers.get("authorization")
        self._metadata = (("authorization", authorization),) if authorization else ()
        self._timeout = request.app.state.settings.unary_timeout

    async def call(self, method: str, message: Any) -> JSONResponse:
        answer = await getattr(self._stub, method)(message, timeout=self._timeout, metadata=self._metadata)
        return JSONResponse(protojson.to_dict(answer))
