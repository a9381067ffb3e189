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

import gateway.clients as clients
import gateway.workers as workers
from flux import defaults
from flux.security import Role
from gateway.browser import CrossSiteCheck, HostCheck, NoFraming, cors, dashboard, docs
from gateway.core import Core
from gateway.observe import health, metrics
from gateway.security import BodyLimit, Guard, HeaderAuth, tickets
from gateway.wire import errors


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    # gRPC address of the core, HOST:PORT.
    core: str = defaults.SERVER
    # An SSE stream idle this long gets a `ping` event, so proxies keep it open.
    ping_interval: float = defaults.PING_INTERVAL
    # How long the core may take to accept or refuse a Connect.
    connect_timeout: float = 10.0
    # A worker that does not read its stream for this long is dropped (its core stream ends).
    send_timeout: float = 30.0
    # CA bundle (PEM) to verify the core's TLS certificate; None dials it in plaintext.
    core_ca: str | None = None
    # Deadline of each unary call to the core.
    unary_timeout: float = 30.0
    # Origins whose pages may call (--cors-origin); none answers no CORS at all.
    cors_origins: tuple[str, ...] = ()
    # Seconds a stream ticket may wait to open its stream.
    ticket_ttl: float = tickets.DEFAULT_TTL
    # Host names the gateway answers to (gateway.browser.browsers.allowed_hosts); empty answers any Host.
    allowed_hosts: tuple[str, ...] = ()
    # The core runs without auth (--insecure): state-changing requests need a header a
    # cross-site page cannot send (gateway.browser.browsers.CrossSiteCheck).
    insecure: bool = False


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
            "its session token in the `X-Flux-Session` header. Worker routes take the worker token and "
            "client routes the API token, as `Authorization: Bearer <token>`; both are checked from the "
            "headers before the body is read. Streams (`/workers/{name}/connect`, "
            "`/executions/{execution_id}/events`, `/events`) also open with `?ticket=`: a short-lived, "
            "single-use ticket from `POST /tickets`, for clients that cannot set headers (EventSource). "
            'Quantities of bytes (`memory`, `disk`, ...) are an integer or a string such as "8Gi", '
            '"512Mi" or "10G". '
            'Refusals are `{"error": {"code": "NOT_FOUND", "message": "..."}}`, with `code` the gRPC '
            "status name and the HTTP status from the same table as the core's."
        ),
        version="1",
        lifespan=lifespan,
        docs_url=None,  # docs.install serves them from shipped assets, not a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.tickets = tickets.TicketBook(settings.ticket_ttl)
    errors.install(app)
    docs.install(app)
    app.include_router(workers.router)
    app.include_router(clients.router)
    app.include_router(clients.tenants_router)
    app.include_router(clients.limits_router)
    app.include_router(clients.batches_router)
    app.include_router(clients.schedules_router)
    app.include_router(tickets.router)
    app.include_router(clients.events_router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    dashboard.install(app)
    # Added in this order, so CORS is outermost (its headers reach refusals too: 401, 413), then a
    # request is authenticated from its headers, then its body is counted as it streams in;
    # /healthz, /metrics, /ui and the OpenAPI pages stay open.
    app.add_middleware(BodyLimit)
    app.add_middleware(HeaderAuth, guards=_guards())
    if settings.insecure:
        app.add_middleware(CrossSiteCheck)
    cors.install(app, settings.cors_origins)
    # Outermost: a request for another Host is refused before anything, and no answer can be framed.
    app.add_middleware(HostCheck, hosts=settings.allowed_hosts)
    app.add_middleware(NoFraming)
    return app


def _guards() -> list[tuple[object, Guard]]:
    guards: list[tuple[object, Guard]] = []
    for route in workers.router.routes:
        path = getattr(route, "path", "")
        session = path != "/workers/register"
        stream = path.endswith("/connect")
        guards.append((route, Guard(Role.WORKER, session, ticket=stream)))
    guards += [(route, Guard(Role.CLIENT)) for route in clients.router.routes]
    guards += [(route, Guard(Role.CLIENT)) for route in clients.tenants_router.routes]
    guards += [(route, Guard(Role.CLIENT)) for route in clients.limits_router.routes]
    guards += [(route, Guard(Role.CLIENT)) for route in clients.batches_router.routes]
    guards += [(route, Guard(Role.CLIENT)) for route in clients.schedules_router.routes]
    guards += [(route, Guard(None)) for route in tickets.router.routes]
    # The observer streams: the API token in the header, or a ticket the route redeems.
    guards += [(route, Guard(Role.CLIENT, ticket=True)) for route in clients.events_router.routes]
    return guards
