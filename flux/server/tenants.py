"""``TenantService``: tenants and their tokens.

A cluster admin may do everything here; a tenant's admin may read its own tenant and
mint tokens for it, up to its own role, and nothing else (flux.server.callers decides
by role; this module keeps a tenant admin inside its tenant). Another tenant is answered
as one that does not exist, as another tenant's execution is.
"""

from __future__ import annotations

import json
import logging
from typing import TypeVar

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.tenants import OPERATOR, Caller, check_role
from flux.errors import InvalidArgument, NotFound, PermissionDenied
from flux.server.answers import unary
from flux.server.callers import Callers
from flux.server.tenant_convert import tenant_from_proto, tenant_to_proto
from flux.v1 import tenants_pb2, tenants_pb2_grpc

log = logging.getLogger("flux.server")
R = TypeVar("R")


class TenantService(tenants_pb2_grpc.TenantServiceServicer):
    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None):
        self.dispatcher = dispatcher
        self.tenants = dispatcher.tenants
        self.callers = callers

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        return OPERATOR if self.callers is None else await self.callers.of(context)

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def CreateTenant(self, request: tenants_pb2.CreateTenantRequest, context: grpc.aio.ServicerContext):
        created = await self.tenants.create(tenant_from_proto(request.tenant))
        return tenants_pb2.CreateTenantResponse(tenant=tenant_to_proto(created))

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def ListTenants(self, request: tenants_pb2.ListTenantsRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        return tenants_pb2.ListTenantsResponse(
            tenants=[tenant_to_proto(t) for t in await self.tenants.list() if caller.sees_tenant(t.name)]
        )

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def GetTenant(self, request: tenants_pb2.GetTenantRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        if not caller.sees_tenant(request.name):
            raise NotFound(f"tenant {request.name!r} does not exist")
        return tenants_pb2.GetTenantResponse(tenant=tenant_to_proto(await self.tenants.get(request.name)))

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def SetTenant(self, request: tenants_pb2.SetTenantRequest, context: grpc.aio.ServicerContext):
        try:
            changes = json.loads(request.changes_json or "{}")
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"changes_json must be a JSON object of tenant fields: {exc}") from None
        if not isinstance(changes, dict) or "name" in changes:
            raise InvalidArgument(
                'changes_json must be a JSON object of tenant fields other than name, e.g. {"gpu": 4}'
            )
        updated = await self.tenants.update(request.name, changes)
        return tenants_pb2.SetTenantResponse(tenant=tenant_to_proto(updated))

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def DeleteTenant(self, request: tenants_pb2.DeleteTenantRequest, context: grpc.aio.ServicerContext):
        await self.tenants.delete(request.name)
        return tenants_pb2.DeleteTenantResponse()

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def ApplyTenants(self, request: tenants_pb2.ApplyTenantsRequest, context: grpc.aio.ServicerContext):
        tenants = [tenant_from_proto(t, f"tenants[{i}]") for i, t in enumerate(request.tenants)]
        applied = await self.tenants.apply(tenants)
        return tenants_pb2.ApplyTenantsResponse(tenants=[tenant_to_proto(t) for t in applied])

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def CreateToken(self, request: tenants_pb2.CreateTokenRequest, context: grpc.aio.ServicerContext):
        role = check_role(request.role or "submit")
        caller = await self._caller(context)
        if not caller.sees_tenant(request.tenant):
            raise PermissionDenied(
                f"a {caller.role} token of tenant {caller.tenant} mints tokens of tenant {caller.tenant} only"
            )
        if not caller.may_grant(role):
            raise PermissionDenied(
                f"a {caller.role} token cannot mint a {role} token; it may mint roles up to its own"
            )
        token = await self.tenants.create_token(request.tenant, role)
        return tenants_pb2.CreateTokenResponse(token=token, tenant=request.tenant, role=role)
