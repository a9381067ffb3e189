"""Refusals as HTTP answers, through ``flux.errors.STATUS`` and nothing else.

A gRPC status from the core becomes the domain error it stands for
(``from_grpc_code``), then the HTTP status the same table gives it; the body
is ``{"error": {"code": "NOT_FOUND", "message": "..."}}`` where ``code`` is
the gRPC status name, which tells apart refusals that share an HTTP status
(409 is both ALREADY_EXISTS and FAILED_PRECONDITION). Any other error a route
raises is INTERNAL (500) in the same shape (``flux.errors.refusal``).
"""

from __future__ import annotations

import logging

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from flux.errors import (
    FluxError,
    InvalidArgument,
    Unauthenticated,
    Unavailable,
    from_grpc_code,
    from_http_status,
    refusal,
    status_of,
)

log = logging.getLogger("flux.gateway")


def from_rpc(exc: grpc.aio.AioRpcError) -> FluxError:
    return from_status(exc.code(), exc.details())


def from_status(code: grpc.StatusCode, details: str | None) -> FluxError:
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return Unavailable(f"the Flux core is unreachable: {details or code.name}")
    return from_grpc_code(code, details or code.name)


# RFC 6750: a 401 names the scheme the caller should use.
CHALLENGE = 'Bearer realm="flux"'


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def error_response(error: FluxError, headers: dict[str, str] | None = None) -> JSONResponse:
    code, status = status_of(error)
    if isinstance(error, Unauthenticated):
        headers = {"WWW-Authenticate": CHALLENGE, **(headers or {})}
    return JSONResponse(error_body(code.name, str(error)), status_code=status, headers=headers)


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

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Anything else a route raised: answered INTERNAL in the same shape (Starlette then logs
        # the traceback), never a bare text 500.
        return error_response(refusal(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{_where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()[:5]]
        return error_response(InvalidArgument("; ".join(problems) or "invalid request"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Unknown routes, wrong methods and unreadable bodies answer in the same shape, with the
        # code and status of the one table (a body that is not JSON is INVALID_ARGUMENT, 422).
        return error_response(from_http_status(exc.status_code, str(exc.detail)), exc.headers)
