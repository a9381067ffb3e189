"""``LimitService``: a tenant's named limits (``flux limit …``).

Any role reads its own tenant's limits; a tenant admin changes its own tenant's, a cluster admin
any tenant's (flux.server.callers decides by role, this module by tenant). A request naming
another tenant than a tenant admin's own is answered as one naming a tenant that does not exist.
Every change is recorded in the audit trail.
"""

from __future__ import annotations

import json

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.tenants import OPERATOR, Caller
from flux.errors import InvalidArgument, NotFound
from flux.server.answers import unary
from flux.server.callers import Callers
from flux.server.limit_convert import limit_from_proto, limit_to_proto
from flux.v1 import limits_pb2, limits_pb2_grpc

DEFAULT_TOP = 10


class LimitService(limits_pb2_grpc.LimitServiceServicer):
    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None):
        self.dispatcher = dispatcher
        self.limits = dispatcher.limits
        self.callers = callers

    async def _scope(self, context: grpc.aio.ServicerContext, tenant: str) -> tuple[Caller, str]:
        """The caller, and the tenant the request is about (the caller's when it names none)."""
        caller = OPERATOR if self.callers is None else await self.callers.of(context)
        tenant = tenant or caller.tenant
        if not caller.sees_tenant(tenant):
            raise NotFound(f"tenant {tenant!r} does not exist")
        await self.dispatcher.tenants.get(tenant)
        return caller, tenant

    @unary("a limit request", invalid=(TypeError, ValueError))
    async def CreateLimit(self, request: limits_pb2.CreateLimitRequest, context: grpc.aio.ServicerContext):
        caller, tenant = await self._scope(context, request.tenant)
        created = await self.limits.create(tenant, limit_from_proto(request.limit))
        await self.dispatcher.audit.record(
            caller, "limit.create", created.name, tenant, terms=created.to_dict()
        )
        return limits_pb2.CreateLimitResponse(limit=limit_to_proto(created, tenant))

    @unary("a limit request", invalid=(TypeError, ValueError))
    async def SetLimit(self, request: limits_pb2.SetLimitRequest, context: grpc.aio.ServicerContext):
        caller, tenant = await self._scope(context, request.tenant)
        try:
            changes = json.loads(request.changes_json or "{}")
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"changes_json must be a JSON object of limit fields: {exc}") from None
        if not isinstance(changes, dict) or "name" in changes:
            raise InvalidArgument(
                'changes_json must be a JSON object of limit fields other than name, e.g. {"concurrency": 4}'
            )
        updated = await self.limits.update(tenant, request.name, changes)
        await self.dispatcher.audit.record(caller, "limit.set", updated.name, tenant, changes=changes)
        return limits_pb2.SetLimitResponse(limit=limit_to_proto(updated, tenant))

    @unary("a limit request", invalid=(TypeError, ValueError))
    async def DeleteLimit(self, request: limits_pb2.DeleteLimitRequest, context: grpc.aio.ServicerContext):
        caller, tenant = await self._scope(context, request.tenant)
        await self.limits.delete(tenant, request.name)
        await self.dispatcher.audit.record(caller, "limit.delete", request.name, tenant)
        return limits_pb2.DeleteLimitResponse()

    @unary("a limit request", invalid=(TypeError, ValueError))
    async def ListLimits(self, request: limits_pb2.ListLimitsRequest, context: grpc.aio.ServicerContext):
        _, tenant = await self._scope(context, request.tenant)
        return limits_pb2.ListLimitsResponse(
            limits=[limit_to_proto(lim, tenant) for lim in self.limits.list(tenant)]
        )

    @unary("a limit request", invalid=(TypeError, ValueError))
    async def GetLimit(self, request: limits_pb2.GetLimitRequest, context: grpc.aio.ServicerContext):
        _, tenant = await self._scope(context, request.tenant)
        limit = self.limits.get(tenant, request.name)
        usage = await self.dispatcher.flow.cluster_usage(tenant, limit.name)
        top = request.top if request.top > 0 else DEFAULT_TOP
        return limits_pb2.GetLimitResponse(
            limit=limit_to_proto(limit, tenant),
            keys=[limits_pb2.LimitKeyUsage(key=k, in_use=u, waiting=w) for k, u, w in usage[:top]],
            key_count=len(usage),
        )

    @unary("a limit request", invalid=(TypeError, ValueError))
    async def ApplyLimits(self, request: limits_pb2.ApplyLimitsRequest, context: grpc.aio.ServicerContext):
        caller, tenant = await self._scope(context, request.tenant)
        limits = [limit_from_proto(m, f"limits[{i}]") for i, m in enumerate(request.limits)]
        applied = await self.limits.apply(tenant, limits)
        for limit in applied:
            await self.dispatcher.audit.record(
                caller, "limit.apply", limit.name, tenant, terms=limit.to_dict()
            )
        return limits_pb2.ApplyLimitsResponse(limits=[limit_to_proto(lim, tenant) for lim in applied])
