"""The Flux gateway: workers and clients over HTTP and Server-Sent Events, in front of the gRPC core.

The composition is at the top: ``app`` (the FastAPI app, its routes and middleware in order),
``server`` (uvicorn inside a loop someone else owns), ``core`` (the one channel to the gRPC
core). The rest is grouped by what it serves, each package with a face (``__init__``):

- ``workers/``: the ``WorkerService`` routes, dispatch pushed as SSE.
- ``clients/``: the ``ControlService`` and ``TenantService`` routes, the observer streams.
- ``browser/``: the dashboard (``ui/``), the API docs pages, Host, framing and CORS checks.
- ``security/``: tokens from the request head, stream tickets, body and connection limits.
- ``observe/``: ``/healthz``, ``/metrics``, the gateway's part of a trace.
- ``wire/``: proto3 JSON, the OpenAPI models, bodies, refusals, the SSE relay.

Outside the gateway, ``flux`` imports only this face.
"""

from gateway.app import GatewaySettings, create_app
from gateway.browser import allowed_hosts
from gateway.browser import origin as cors_origin
from gateway.security import HttpLimits
from gateway.server import GatewayConfig, RunningGateway, run, start_gateway

__all__ = [
    "GatewayConfig", "GatewaySettings", "HttpLimits", "RunningGateway", "allowed_hosts", "cors_origin",
    "create_app", "run", "start_gateway",
]  # fmt: skip
