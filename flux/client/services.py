"""The blocking client's other services, one accessor each, made on first use: tenants and tokens,
named limits, schedules and batches. ``FluxClient`` (sync.py) mixes them in; each call goes
through its ``_call`` (the client's token, timeout and error mapping)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import grpc

from flux.client.batches import BatchCalls, batch_calls
from flux.client.limit_admin import LimitAdmin
from flux.client.schedule_admin import ScheduleAdmin
from flux.client.tenant_admin import TenantAdmin
from flux.v1 import limits_pb2_grpc, schedules_pb2_grpc, tenants_pb2_grpc


class Services:
    # FluxClient's (sync.py): declared here for the accessors, defined there.
    _channel: grpc.Channel
    _metadata: tuple[tuple[str, str], ...]
    timeout: float
    _call: Callable[..., Any]
    _error: Callable[[grpc.RpcError], Exception]

    @functools.cached_property
    def tenants(self) -> TenantAdmin:
        """Tenants and their tokens (``flux.client.tenant_admin``; an admin token: tenant admins see their own tenant)."""
        stub = tenants_pb2_grpc.TenantServiceStub(self._channel)
        return TenantAdmin(lambda method, request: self._call(method, request, stub=stub))

    @functools.cached_property
    def limits(self) -> LimitAdmin:
        """The tenant's named limits (``flux.client.limit_admin``; an admin token changes them)."""
        stub = limits_pb2_grpc.LimitServiceStub(self._channel)
        return LimitAdmin(lambda method, request: self._call(method, request, stub=stub))

    @functools.cached_property
    def schedules(self) -> ScheduleAdmin:
        """The tenant's schedules (``flux.client.schedule_admin``; an admin token changes them)."""
        stub = schedules_pb2_grpc.ScheduleServiceStub(self._channel)
        return ScheduleAdmin(lambda method, request: self._call(method, request, stub=stub))

    @functools.cached_property
    def batches(self) -> BatchCalls:
        """Batches by id (``map``'s ``.batch_id``): ``get``, ``watch``, ``wait``, ``cancel``."""
        return batch_calls(self._channel, self._metadata, self.timeout, self._error)
