"""Refusals as HTTP answers, through ``flux.errors.STATUS`` and nothing else.

A gRPC status from the core becomes the domain error it stands for
(``from_grpc_code``), then the HTTP status the same table gives it; the body
is ``{"error": {"code": "NOT_FOUND", "message": "..."}}`` where ``code`` is
the gRPC status name, which tells apart refusals that share an HTTP status
(409 is both ALREADY_EXISTS and FAILED_PRECONDITION).
"""

from __future__ import annotations

import http
import logging

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from flux.errors import FluxError, InvalidArgument, Unavailable, from_grpc_code, status_of

log = logging.getLogger("flux.gateway")


def from_rpc(exc: grpc.aio.AioRpcError) -> FluxError:
    code = exc.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return Unavailable(f"the Flux core is unreachable: {exc.details() or code.name}")
    return from_grpc_code(code, exc.details() or code.name)


def error_response(error: FluxError) -> JSONResponse:
    code, status = status_of(error)
    return JSONResponse({"error": {"code": code.name, "message": str(error)}}, status_code=status)


def _where(loc: tuple[object, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def install(app: FastAPI) -> None:
    @app.exception_handler(FluxError)
    async def flux_error(request: Request, exc: FluxError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(grpc.aio.AioRpcError)
    async def rpc_error(request: Request, exc: grpc.aio.AioRpcError) -> JSONResponse:
        return error_response(from_rpc(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{_where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()[:5]]
        return error_response(InvalidArgument("; ".join(problems) or "invalid request"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Unknown routes and wrong methods answer in the same shape as every other refusal.
        code = http.HTTPStatus(exc.status_code).name
        return JSONResponse(
            {"error": {"code": code, "message": str(exc.detail)}},
            status_code=exc.status_code,
            headers=exc.headers,
        )
