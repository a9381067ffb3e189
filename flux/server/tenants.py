"""``TenantService``: tenants, their tokens, and the audit trail.

A cluster admin may do everything here; a tenant's admin may read its own tenant, mint
tokens for it (up to its own role), list and revoke its tokens and read the audit
entries about it, and nothing else (flux.server.callers decides by role; this module
keeps a tenant admin inside its tenant). Another tenant, and another tenant's token, is
answered as one that does not exist, as another tenant's execution is. Every change here
is recorded in the audit trail (flux.dispatcher.state.audit), never with a token in it.
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
from flux.store import AuditRecord, TokenRecord
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
        await self._audit(context, "tenant.create", created.name, created.name, terms=created.to_dict())
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
        await self._audit(context, "tenant.set", updated.name, updated.name, changes=changes)
        return tenants_pb2.SetTenantResponse(tenant=tenant_to_proto(updated))

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def DeleteTenant(self, request: tenants_pb2.DeleteTenantRequest, context: grpc.aio.ServicerContext):
        tombstone = await self.tenants.delete(request.name)
        await self._audit(context, "tenant.delete", request.name, request.name, records_now_under=tombstone)
        return tenants_pb2.DeleteTenantResponse()

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def ApplyTenants(self, request: tenants_pb2.ApplyTenantsRequest, context: grpc.aio.ServicerContext):
        tenants = [tenant_from_proto(t, f"tenants[{i}]") for i, t in enumerate(request.tenants)]
        applied = await self.tenants.apply(tenants)
        caller = await self._caller(context)
        for tenant in applied:
            await self.dispatcher.audit.record(
                caller, "tenant.apply", tenant.name, tenant.name, terms=tenant.to_dict()
            )
        return tenants_pb2.ApplyTenantsResponse(tenants=[tenant_to_proto(t) for t in applied])

    @unary("a tenant request", invalid=(TypeError, ValueError))
    async def CreateToken(self, request: tenants_pb2.CreateTokenRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        if request.worker or request.pool:
            return await self._create_worker_token(request, caller)
        role = check_role(request.role or "submit")
        if not caller.sees_tenant(request.tenant):
            raise PermissionDenied(
                f"a {caller.role} token of tenant {caller.tenant} mints tokens of tenant {caller.tenant} only"
            )
        if not caller.may_grant(role):
            raise PermissionDenied(
                f"a {caller.role} token cannot mint a {role} token; it may mint roles up to its own"
            )
        token, record = await self.tenants.create_token(
            request.tenant, role, request.name, float(request.expires_in_seconds)
        )
        await self.dispatcher.audit.record(
            caller, "token.create", record.id, record.tenant,
            role=role, name=record.name, expires_at=record.expires_at,
        )  # fmt: skip
        return tenants_pb2.CreateTokenResponse(
            token=token, tenant=request.tenant, role=role, id=record.id, expires_at=record.expires_at or 0.0
        )

    async def _create_worker_token(
        self, request: tenants_pb2.CreateTokenRequest, caller: Caller
    ) -> tenants_pb2.CreateTokenResponse:
        if not caller.cluster_admin:
            raise PermissionDenied(
                f"a {caller.role} token cannot mint a worker token; the fleet is the cluster admin's"
            )
        if not request.worker or not request.pool or request.tenant or request.role:
            raise InvalidArgument(
                "a worker token needs worker=true and pool (e.g. 'gpu'), and no tenant or role: "
                "flux token create --worker --pool gpu"
            )
        token, record = await self.tenants.create_worker_token(
            request.pool, request.name, float(request.expires_in_seconds)
        )
        await self.dispatcher.audit.record(
            caller, "token.create", record.id, "",
            role=record.role, pool=record.pool, name=record.name, expires_at=record.expires_at,
        )  # fmt: skip
        return tenants_pb2.CreateTokenResponse(
            token=token, role=record.role, id=record.id, expires_at=record.expires_at or 0.0
        )

    @unary("a token request", invalid=(TypeError, ValueError))
    async def ListTokens(self, request: tenants_pb2.ListTokensRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        if request.tenant and not caller.sees_tenant(request.tenant):
            raise NotFound(f"tenant {request.tenant!r} does not exist")
        tokens = await self.tenants.list_tokens(request.tenant or caller.scope)
        return tenants_pb2.ListTokensResponse(tokens=[token_to_proto(t) for t in tokens])

    @unary("a token request", invalid=(TypeError, ValueError))
    async def RevokeToken(self, request: tenants_pb2.RevokeTokenRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        revoked = await self.tenants.revoke_token(request.id, caller.scope)
        await self.dispatcher.audit.record(
            caller, "token.revoke", revoked.id, revoked.tenant, role=revoked.role, name=revoked.name
        )
        return tenants_pb2.RevokeTokenResponse(token=token_to_proto(revoked))

    @unary("an audit request", invalid=(TypeError, ValueError))
    async def ListAudit(self, request: tenants_pb2.ListAuditRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        entries = await self.dispatcher.audit.list(caller, request.since, request.limit)
        return tenants_pb2.ListAuditResponse(entries=[audit_to_proto(e) for e in entries])

    async def _audit(
        self, context: grpc.aio.ServicerContext, action: str, target: str, tenant: str, **details: object
    ) -> None:
        await self.dispatcher.audit.record(await self._caller(context), action, target, tenant, **details)


def token_to_proto(token: TokenRecord) -> tenants_pb2.TokenInfo:
    """Never the digest: a listing shows which token, not anything that could stand for it."""
    return tenants_pb2.TokenInfo(
        id=token.id, name=token.name, tenant=token.tenant, role=token.role, created_at=token.created_at,
        expires_at=token.expires_at or 0.0, last_used_at=token.last_used_at or 0.0, pool=token.pool,
    )  # fmt: skip


def audit_to_proto(entry: AuditRecord) -> tenants_pb2.AuditEntry:
    return tenants_pb2.AuditEntry(
        at=entry.at, token_id=entry.token_id, caller_tenant=entry.caller_tenant, caller_role=entry.caller_role,
        action=entry.action, target=entry.target, tenant=entry.tenant, details_json=entry.details_json,
    )  # fmt: skip
