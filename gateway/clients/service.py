"""One administrative gRPC service as the REST routes call it: its stub over the core's channel,
with the caller's ``authorization`` passed on, so the core decides who may do what (the gateway
holds no tenancy of its own). The tenants' and the limits' routes share it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway.wire import protojson, schema


class ServiceCalls:
    def __init__(self, request: Request, stub: Callable[[Any], Any]):
        self._stub = stub(request.app.state.core.channel)
        authorization = request.headers.get("authorization")
        self._metadata = (("authorization", authorization),) if authorization else ()
        self._timeout = request.app.state.settings.unary_timeout

    async def call(self, method: str, message: Any) -> JSONResponse:
        answer = await getattr(self._stub, method)(message, timeout=self._timeout, metadata=self._metadata)
        return JSONResponse(protojson.to_dict(answer))


def named_refusals(noun: str) -> Callable[..., dict[int | str, dict[str, object]]]:
    """The documented refusals of a tenant's named objects' routes (limits, schedules): every route
    may answer 401, 403, 422 and 503; ``refusals(404, 409)`` adds the ones a route names."""
    why = {
        401: "no API token, or not a valid one",
        403: "a token whose role may not do this (or the worker token)",
        404: f"no such {noun} (or tenant)",
        409: f"a {noun} of that name exists already in the tenant",
        422: "invalid body, path or query",
        503: "the core is unreachable",
    }

    def refusals(*statuses: int) -> dict[int | str, dict[str, object]]:
        return schema.refusals({status: why[status] for status in {401, 403, *statuses, 422, 503}})

    return refusals
