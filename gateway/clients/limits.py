"""Named-limit routes: the ``LimitService`` as REST (any API token reads its tenant's limits, an
admin token changes them; the core decides which). ``?tenant=`` names another tenant (cluster
admins only: to anyone else it is a tenant that does not exist, 404)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from flux.v1 import limits_pb2, limits_pb2_grpc
from gateway.clients.service import ServiceCalls, named_refusals
from gateway.security import API_BEARER
from gateway.wire import OffLoopJSONRoute, schema, to_message

router = APIRouter(tags=["limits"], dependencies=[Depends(API_BEARER)], route_class=OffLoopJSONRoute)

LimitName = Annotated[str, Path(description="the limit's name, as in GET /limits", max_length=64)]
TenantQuery = Annotated[str, Query(description="the tenant (default: the token's)", max_length=63)]

Limit = schema.model_of(limits_pb2.Limit.DESCRIPTOR)
ListLimitsResponse = schema.model_of(limits_pb2.ListLimitsResponse.DESCRIPTOR)
LimitAnswer = schema.model_of(limits_pb2.CreateLimitResponse.DESCRIPTOR)
GetLimitResponse = schema.model_of(limits_pb2.GetLimitResponse.DESCRIPTOR)

_refusals = named_refusals("limit")


async def limits(request: Request) -> ServiceCalls:
    return ServiceCalls(request, limits_pb2_grpc.LimitServiceStub)


LimitsDep = Annotated[ServiceCalls, Depends(limits)]


@router.get("/limits", response_model=ListLimitsResponse, responses=_refusals(404))
async def list_limits(service: LimitsDep, tenant: TenantQuery = "") -> JSONResponse:
    """The tenant's named limits, by name."""
    return await service.call("ListLimits", limits_pb2.ListLimitsRequest(tenant=tenant))


@router.post("/limits", response_model=LimitAnswer, responses=_refusals(404, 409))
async def create_limit(
    body: Limit, request: Request, service: LimitsDep, tenant: TenantQuery = ""
) -> JSONResponse:  # type: ignore[valid-type]
    """Create a named limit; 409 when the tenant has one of that name."""
    limit = await to_message(body.to_json_dict(), limits_pb2.Limit(), request)  # type: ignore[attr-defined]
    return await service.call("CreateLimit", limits_pb2.CreateLimitRequest(limit=limit, tenant=tenant))


@router.get("/limits/{name}", response_model=GetLimitResponse, responses=_refusals(404))
async def get_limit(
    name: LimitName,
    service: LimitsDep,
    tenant: TenantQuery = "",
    top: Annotated[int, Query(ge=0, le=1000, description="the busiest keys shown at most (0: 10)")] = 0,
) -> JSONResponse:
    """One limit, with its busiest keys in use and waiting now."""
    return await service.call("GetLimit", limits_pb2.GetLimitRequest(name=name, tenant=tenant, top=top))


@router.patch("/limits/{name}", response_model=LimitAnswer, responses=_refusals(404))
async def set_limit(
    name: LimitName,
    service: LimitsDep,
    changes: Annotated[
        dict[str, Any],
        Body(
            description='The fields to change ({"concurrency": 4, "rate": "100/m"}); null clears one.',
            examples=[{"concurrency": 4}, {"rate": "100/m", "burst": 10}],
        ),
    ],
    tenant: TenantQuery = "",
) -> JSONResponse:
    """Change some of a limit's terms; it applies to waiting work at once."""
    message = limits_pb2.SetLimitRequest(name=name, changes_json=json.dumps(changes), tenant=tenant)
    return await service.call("SetLimit", message)


@router.delete("/limits/{name}", responses=_refusals(404))
async def delete_limit(name: LimitName, service: LimitsDep, tenant: TenantQuery = "") -> JSONResponse:
    """Delete a limit: the workflows naming it are no longer held back by it."""
    return await service.call("DeleteLimit", limits_pb2.DeleteLimitRequest(name=name, tenant=tenant))
