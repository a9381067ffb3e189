"""The gateway app: HTTP and Server-Sent Events in front of the gRPC core.

It holds no dispatch state. Every route converts its input to a ``flux.v1``
message, calls the core over one shared channel, and converts the answer
back; every SSE connection is one ``WorkerService.Connect`` call. So any
number of gateways can front one core, and restarting one loses nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from fastapi import FastAPI

from flux.auth import Role
from gateway import clients, errors, health, metrics, workers
from gateway.auth import Guard, HeaderAuth
from gateway.core import Core
from gateway.limits import BodyLimit


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    # gRPC address of the core, HOST:PORT.
    core: str = "127.0.0.1:50051"
    # An SSE stream idle this long gets a `ping` event, so proxies keep it open.
    ping_interval: float = 15.0
    # How long the core may take to accept or refuse a Connect.
    connect_timeout: float = 10.0
    # A worker that does not read its stream for this long is dropped (its core stream ends).
    send_timeout: float = 30.0
    # CA bundle (PEM) to verify the core's TLS certificate; None dials it in plaintext.
    core_ca: str | None = None
    # Deadline of each unary call to the core.
    unary_timeout: float = 30.0


def create_app(settings: GatewaySettings | None = None, channel: grpc.aio.Channel | None = None) -> FastAPI:
    """The app; ``channel`` replaces the one it would open to ``settings.core`` (e.g. an in-process one)."""
    settings = settings or GatewaySettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The channel belongs to the serving loop, so it is opened here and not at import.
        app.state.core = Core.open(settings.core, channel, settings.core_ca)
        try:
            yield
        finally:
            await app.state.core.close()

    app = FastAPI(
        title="Flux gateway",
        summary="Workers and clients of the Flux control plane over HTTP and Server-Sent Events.",
        description=(
            "Bodies and answers use the proto3 JSON mapping of the `flux.v1` messages with the `.proto` "
            "field names (`execution_id`); 64-bit integers are strings, enums are names. A worker sends "
            "its session token in the `X-Flux-Session` header (`?session_token=` on `/connect` too, "
            "deprecated). Worker routes take the worker token and client routes the API token, as "
            "`Authorization: Bearer <token>`; both are checked from the headers before the body is read. "
            'Refusals are `{"error": {"code": "NOT_FOUND", "message": "..."}}`, with `code` the gRPC '
            "status name and the HTTP status from the same table as the core's."
        ),
        version="1",
        lifespan=lifespan,
    )
    app.state.settings = settings
    errors.install(app)
    app.include_router(workers.router)
    app.include_router(clients.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    # Added last, so outermost: a request is authenticated from its headers, then its body is
    # counted as it streams in; /healthz, /metrics and the OpenAPI pages stay open.
    app.add_middleware(BodyLimit)
    app.add_middleware(HeaderAuth, guards=_guards())
    return app


def _guards() -> list[tuple[object, Guard]]:
    guards: list[tuple[object, Guard]] = []
    for route in workers.router.routes:
        path = getattr(route, "path", "")
        session = path != "/workers/register"
        guards.append((route, Guard(Role.WORKER, session, path.endswith("/connect"))))
    guards += [(route, Guard(Role.CLIENT)) for route in clients.router.routes]
    return guards
