"""The clients' other services, one accessor each, made on first use: tenants and tokens,
named limits, schedules and batches. ``FluxClient`` (sync.py) mixes in ``Services``, whose calls go
through its ``_call`` (the client's token, timeout and error mapping); the asyncio client (aio.py)
mixes in ``AsyncServices``."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from flux.client.batches import AsyncBatchCalls, BatchCalls, async_batch_calls, batch_calls
from flux.client.limit_admin import AsyncLimitAdmin, LimitAdmin
from flux.client.schedule_admin import AsyncScheduleAdmin, ScheduleAdmin
from flux.client.tenant_admin import AsyncTenantAdmin, TenantAdmin
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


class AsyncServices:
    """The same accessors for ``flux.aio.FluxClient`` (aio.py): each call a coroutine."""

    _channel: grpc.aio.Channel
    _metadata: tuple[tuple[str, str], ...]
    timeout: float
    _error: Callable[[grpc.RpcError], Awaitable[Exception]]

    def _caller(self, stub: Any) -> Callable[[str, Any], Awaitable[Any]]:
        async def call(method: str, request: Any) -> Any:
            try:
                return await getattr(stub, method)(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                raise await self._error(exc) from None

        return call

    @functools.cached_property
    def tenants(self) -> AsyncTenantAdmin:
        """Tenants and their tokens (``flux.client.tenant_admin``; an admin token: tenant admins see their own tenant)."""
        return AsyncTenantAdmin(self._caller(tenants_pb2_grpc.TenantServiceStub(self._channel)))

    @functools.cached_property
    def limits(self) -> AsyncLimitAdmin:
        """The tenant's named limits (``flux.client.limit_admin``; an admin token changes them)."""
        return AsyncLimitAdmin(self._caller(limits_pb2_grpc.LimitServiceStub(self._channel)))

    @functools.cached_property
    def schedules(self) -> AsyncScheduleAdmin:
        """The tenant's schedules (``flux.client.schedule_admin``; an admin token changes them)."""
        return AsyncScheduleAdmin(self._caller(schedules_pb2_grpc.ScheduleServiceStub(self._channel)))

    @functools.cached_property
    def batches(self) -> AsyncBatchCalls:
        """Batches by id, as ``FluxClient.batches`` (each call a coroutine; ``watch`` an async iterator)."""
        return async_batch_calls(self._channel, self._metadata, self.timeout, self._error)
