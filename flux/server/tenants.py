"""``TenantService``: tenants and their tokens (admin tokens only: flux.server.callers)."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from flux.dispatcher.core import Dispatcher
from flux.errors import Internal, InvalidArgument, refusal, status_of
from flux.server.tenant_convert import tenant_from_proto, tenant_to_proto
from flux.v1 import tenants_pb2, tenants_pb2_grpc

log = logging.getLogger("flux.server")
R = TypeVar("R")


def _unary(handler: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Every error becomes a status through the one table (``flux.errors``); a bad field is INVALID_ARGUMENT."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await handler(self, request, context)
        except (TypeError, ValueError) as exc:  # Tenant's checks name the field and the accepted form
            error = exc if isinstance(exc, InvalidArgument) else InvalidArgument(str(exc))
            await context.abort(status_of(error)[0], str(error))
            raise  # unreachable: abort raises
        except Exception as exc:
            error = refusal(exc, self.dispatcher.store.unavailable)
            if isinstance(error, Internal):
                log.error("a tenant request failed", exc_info=exc)
            await context.abort(status_of(error)[0], str(error))
            raise  # unreachable: abort raises

    return wrapper


class TenantService(tenants_pb2_grpc.TenantServiceServicer):
    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher
        self.tenants = dispatcher.tenants

    @_unary
    async def CreateTenant(self, request: tenants_pb2.CreateTenantRequest, context: grpc.aio.ServicerContext):
        created = await self.tenants.create(tenant_from_proto(request.tenant))
        return tenants_pb2.CreateTenantResponse(tenant=tenant_to_proto(created))

    @_unary
    async def ListTenants(self, request: tenants_pb2.ListTenantsRequest, context: grpc.aio.ServicerContext):
        return tenants_pb2.ListTenantsResponse(
            tenants=[tenant_to_proto(t) for t in await self.tenants.list()]
        )

    @_unary
    async def GetTenant(self, request: tenants_pb2.GetTenantRequest, context: grpc.aio.ServicerContext):
        return tenants_pb2.GetTenantResponse(tenant=tenant_to_proto(await self.tenants.get(request.name)))

    @_unary
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

    @_unary
    async def DeleteTenant(self, request: tenants_pb2.DeleteTenantRequest, context: grpc.aio.ServicerContext):
        await self.tenants.delete(request.name)
        return tenants_pb2.DeleteTenantResponse()

    @_unary
    async def ApplyTenants(self, request: tenants_pb2.ApplyTenantsRequest, context: grpc.aio.ServicerContext):
        tenants = [tenant_from_proto(t, f"tenants[{i}]") for i, t in enumerate(request.tenants)]
        applied = await self.tenants.apply(tenants)
        return tenants_pb2.ApplyTenantsResponse(tenants=[tenant_to_proto(t) for t in applied])

    @_unary
    async def CreateToken(self, request: tenants_pb2.CreateTokenRequest, context: grpc.aio.ServicerContext):
        role = request.role or "submit"
        token = await self.tenants.create_token(request.tenant, role)
        return tenants_pb2.CreateTokenResponse(token=token, tenant=request.tenant, role=role)
