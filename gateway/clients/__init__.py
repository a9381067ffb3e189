"""What clients call: the ``ControlService`` and ``TenantService`` as REST, and the observer streams.

- ``routes``: runs, executions, workflows, the cluster (``router``).
- ``tenants``: tenants and their tokens (``tenants_router``).
- ``limits``: the tenants' named limits (``limits_router``).
- ``batches``: batches' progress, waits and cancels (``batches_router``).
- ``schedules``: the tenants' schedules (``schedules_router``).
- ``events``: one execution's events and the fleet's, over SSE (``events_router``).
"""

from gateway.clients.batches import router as batches_router
from gateway.clients.events import router as events_router
from gateway.clients.limits import router as limits_router
from gateway.clients.routes import router
from gateway.clients.schedules import router as schedules_router
from gateway.clients.tenants import router as tenants_router

__all__ = ["batches_router", "events_router", "limits_router", "router", "schedules_router", "tenants_router"]
