"""The services beside ControlService and WorkerService: pools, named limits, batches, schedules,
tenants. Each is one row here, served on the real server and on the in-process channel alike
(serve.py), and listed for reflection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flux.dispatcher.core import Dispatcher
from flux.server.batches import BatchService
from flux.server.callers import Callers
from flux.server.limits import LimitService
from flux.server.pools import PoolService
from flux.server.schedules import ScheduleService
from flux.server.tenants import TenantService
from flux.v1 import (
    batches_pb2,
    batches_pb2_grpc,
    limits_pb2,
    limits_pb2_grpc,
    pools_pb2,
    pools_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tenants_pb2,
    tenants_pb2_grpc,
)

# (its descriptor's module, its name, how grpc adds it, its servicer)
SERVICES: tuple[tuple[Any, str, Callable[[Any, Any], None], type], ...] = (
    (pools_pb2, "PoolService", pools_pb2_grpc.add_PoolServiceServicer_to_server, PoolService),
    (limits_pb2, "LimitService", limits_pb2_grpc.add_LimitServiceServicer_to_server, LimitService),
    (batches_pb2, "BatchService", batches_pb2_grpc.add_BatchServiceServicer_to_server, BatchService),
    (
        schedules_pb2,
        "ScheduleService",
        schedules_pb2_grpc.add_ScheduleServiceServicer_to_server,
        ScheduleService,
    ),
    (tenants_pb2, "TenantService", tenants_pb2_grpc.add_TenantServiceServicer_to_server, TenantService),
)


def add_admin_services(dispatcher: Dispatcher, callers: Callers, target: Any) -> None:
    """Serve each on ``target`` (a grpc.aio server or the in-process registry)."""
    for _, _, add, servicer in SERVICES:
        add(servicer(dispatcher, callers), target)


def admin_service_names() -> tuple[str, ...]:
    """Their full names (``flux.v1.PoolService``, …), for reflection."""
    return tuple(module.DESCRIPTOR.services_by_name[name].full_name for module, name, _, _ in SERVICES)
