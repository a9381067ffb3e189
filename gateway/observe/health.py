"""``GET /healthz``: open to anyone, as load balancers probe it."""

from __future__ import annotations

import grpc
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from grpc_health.v1 import health_pb2

from gateway.wire import schema

router = APIRouter(tags=["ops"])


@router.get("/healthz", response_model=schema.Health, responses={503: {"model": schema.Health}})
async def healthz(request: Request) -> JSONResponse:
    """200 while the core answers its gRPC health check, 503 otherwise."""
    try:
        answer = await request.app.state.core.health.Check(health_pb2.HealthCheckRequest(), timeout=2)
        serving = answer.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.aio.AioRpcError:
        serving = False
    status = "SERVING" if serving else "NOT_SERVING"
    # Unauthenticated, so it names no internal address.
    return JSONResponse({"status": status}, status_code=200 if serving else 503)
