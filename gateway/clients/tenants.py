"""Tenant routes: the ``TenantService`` as REST (admin API tokens; the core decides which)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from flux.v1 import tenants_pb2, tenants_pb2_grpc
from gateway.clients.service import ServiceCalls
from gateway.security import API_BEARER
from gateway.wire import OffLoopJSONRoute, schema, to_message

router = APIRouter(tags=["tenants"], dependencies=[Depends(API_BEARER)], route_class=OffLoopJSONRoute)

TenantName = Annotated[str, Path(description="the tenant's name, as in GET /tenants", max_length=63)]

Tenant = schema.model_of(tenants_pb2.Tenant.DESCRIPTOR)
ListTenantsResponse = schema.model_of(tenants_pb2.ListTenantsResponse.DESCRIPTOR)
TenantAnswer = schema.model_of(tenants_pb2.GetTenantResponse.DESCRIPTOR)
ApplyTenantsRequest = schema.model_of(tenants_pb2.ApplyTenantsRequest.DESCRIPTOR)
ApplyTenantsResponse = schema.model_of(tenants_pb2.ApplyTenantsResponse.DESCRIPTOR)
CreateTokenRequest = schema.model_of(tenants_pb2.CreateTokenRequest.DESCRIPTOR)
CreateTokenResponse = schema.model_of(tenants_pb2.CreateTokenResponse.DESCRIPTOR)
ListTokensResponse = schema.model_of(tenants_pb2.ListTokensResponse.DESCRIPTOR)
RevokeTokenResponse = schema.model_of(tenants_pb2.RevokeTokenResponse.DESCRIPTOR)
ListAuditResponse = schema.model_of(tenants_pb2.ListAuditResponse.DESCRIPTOR)

TokenId = Annotated[str, Path(description="the token's id, as in GET /tokens", max_length=64)]

_WHY = {
    401: "no API token, or not a valid one",
    403: "a token whose role or tenant may not do this (or the worker token)",
    404: "no such tenant (or token)",
    409: "a tenant of that name exists already, or (delete) it is tenant default",
    422: "invalid body, path or query",
    503: "the core is unreachable",
}


def _refusals(*statuses: int) -> dict[int | str, dict[str, object]]:
    return schema.refusals({status: _WHY[status] for status in {401, 403, *statuses, 422, 503}})


async def tenants(request: Request) -> ServiceCalls:
    return ServiceCalls(request, tenants_pb2_grpc.TenantServiceStub)


TenantsDep = Annotated[ServiceCalls, Depends(tenants)]


@router.get("/tenants", response_model=ListTenantsResponse, responses=_refusals())
async def list_tenants(service: TenantsDep) -> JSONResponse:
    """Every tenant with its quota, cohort, limits and weight, by name (`default` always exists)."""
    return await service.call("ListTenants", tenants_pb2.ListTenantsRequest())


@router.post("/tenants", response_model=TenantAnswer, responses=_refusals(409))
async def create_tenant(body: Tenant, request: Request, service: TenantsDep) -> JSONResponse:  # type: ignore[valid-type]
    """Create a tenant; 409 when the name is taken."""
    tenant = await to_message(body.to_json_dict(), tenants_pb2.Tenant(), request)  # type: ignore[attr-defined]
    return await service.call("CreateTenant", tenants_pb2.CreateTenantRequest(tenant=tenant))


@router.put("/tenants", response_model=ApplyTenantsResponse, responses=_refusals())
async def apply_tenants(body: ApplyTenantsRequest, request: Request, service: TenantsDep) -> JSONResponse:  # type: ignore[valid-type]
    """Create or replace tenants by name, all of them or none (what `flux tenant apply FILE` sends)."""
    message = await to_message(body.to_json_dict(), tenants_pb2.ApplyTenantsRequest(), request)  # type: ignore[attr-defined]
    return await service.call("ApplyTenants", message)


@router.get("/tenants/{name}", response_model=TenantAnswer, responses=_refusals(404))
async def get_tenant(name: TenantName, service: TenantsDep) -> JSONResponse:
    """One tenant's terms."""
    return await service.call("GetTenant", tenants_pb2.GetTenantRequest(name=name))


@router.patch("/tenants/{name}", response_model=TenantAnswer, responses=_refusals(404))
async def set_tenant(
    name: TenantName,
    service: TenantsDep,
    changes: Annotated[
        dict[str, Any],
        Body(
            description='The fields to change, as in a tenants file ({"gpu": 4, "borrowing_limit": {"gpu": 2}}); '
            "null clears one.",
            examples=[
                {"gpu": 4, "weight": 2},
                {"executions": 8, "max_pending": 500, "max_pending_bytes": "1Gi"},
            ],
        ),
    ],
) -> JSONResponse:
    """Change some of a tenant's terms."""
    message = tenants_pb2.SetTenantRequest(name=name, changes_json=json.dumps(changes))
    return await service.call("SetTenant", message)


@router.delete("/tenants/{name}", responses=_refusals(404, 409))
async def delete_tenant(name: TenantName, service: TenantsDep) -> JSONResponse:
    """Delete a tenant and its tokens; its executions keep their tenant."""
    return await service.call("DeleteTenant", tenants_pb2.DeleteTenantRequest(name=name))


@router.post("/tokens", response_model=CreateTokenResponse, responses=_refusals(404))
async def create_token(body: CreateTokenRequest, request: Request, service: TenantsDep) -> JSONResponse:  # type: ignore[valid-type]
    """A new API token for a tenant, shown only in this answer.

    `role`: submit (the default), read, admin or cluster-admin, up to the caller's own; a tenant's
    admin mints tokens of its own tenant only."""
    message = await to_message(body.to_json_dict(), tenants_pb2.CreateTokenRequest(), request)  # type: ignore[attr-defined]
    return await service.call("CreateToken", message)


@router.get("/tokens", response_model=ListTokensResponse, responses=_refusals(404))
async def list_tokens(
    service: TenantsDep,
    tenant: Annotated[str, Query(description="only this tenant's tokens", max_length=63)] = "",
) -> JSONResponse:
    """Tokens not revoked, newest first, never their secrets: a tenant admin's own tenant's, a
    cluster admin's every tenant's."""
    return await service.call("ListTokens", tenants_pb2.ListTokensRequest(tenant=tenant))


@router.delete("/tokens/{token_id}", response_model=RevokeTokenResponse, responses=_refusals(404))
async def revoke_token(token_id: TokenId, service: TenantsDep) -> JSONResponse:
    """Revoke a token by its id: refused at once here and within a second on every replica. Another
    tenant's token answers 404, as a missing one does."""
    return await service.call("RevokeToken", tenants_pb2.RevokeTokenRequest(id=token_id))


@router.get("/audit", response_model=ListAuditResponse, responses=_refusals())
async def list_audit(
    service: TenantsDep,
    since: Annotated[
        float, Query(description="only entries at or after this time (seconds since the epoch)", ge=0)
    ] = 0,
    limit: Annotated[int, Query(description="at most this many (0: 1000)", ge=0, le=1000)] = 0,
) -> JSONResponse:
    """Administrative changes, newest first: who (token id, tenant, role), what, when. A tenant
    admin sees the entries about its own tenant."""
    return await service.call("ListAudit", tenants_pb2.ListAuditRequest(since=since, limit=limit))
